/*
 * libushuffle_jni: the Spark plugin's native half (org.apache.spark.shuffle.
 * ushuffle.Native). A thin layer over the public API: every call maps to one
 * or a few ush_* calls, and a failure throws UShuffleException carrying the
 * library's code and ush_last_error()'s message.
 *
 * Ownership: a writer handle (struct jw) owns its ring and writer, both
 * created, used and freed on the Spark task thread that opened it (the ring
 * is SINGLE_ISSUER). Push buffers are lent to Java as direct ByteBuffers
 * over the ring's registered memory; Java hands one back with swap() or
 * release() and must not touch it after (Native.java invalidates its view).
 * A reader handle is a ush_reader; a record it yields is lent to Java as a
 * direct ByteBuffer valid until the next readerNext() or readerFree().
 * No JNI call is made per Spark record, and native code never calls back
 * into Java.
 */
#define _GNU_SOURCE /* explicit_bzero */
#include <jni.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ushuffle/ushuffle.h>
#include <ushuffle/worker.h>

static jclass exc_class;     /* UShuffleException */
static jmethodID exc_ctor;   /* (String, int) */

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved)
{
	JNIEnv *env;
	(void)reserved;
	if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK)
		return JNI_ERR;
	jclass c = (*env)->FindClass(env,
		"org/apache/spark/shuffle/ushuffle/UShuffleException");
	if (!c)
		return JNI_ERR;
	exc_class = (*env)->NewGlobalRef(env, c);
	exc_ctor = (*env)->GetMethodID(env, c, "<init>",
				       "(Ljava/lang/String;I)V");
	return exc_ctor ? JNI_VERSION_1_8 : JNI_ERR;
}

/* Throws UShuffleException(what: ush_last_error(), rc). Returns rc. */
static int throw_ush(JNIEnv *env, const char *what, int rc, const char *msg)
{
	char text[1024];
	if (!msg || !*msg)
		msg = ush_strerror(rc);
	snprintf(text, sizeof(text), "%s: %s (%s)", what, msg,
		 ush_err_name(rc));
	jstring s = (*env)->NewStringUTF(env, text);
	if (!s)
		return rc; /* OutOfMemoryError pending */
	jobject e = (*env)->NewObject(env, exc_class, exc_ctor, s, (jint)rc);
	if (e)
		(*env)->Throw(env, e);
	return rc;
}

static int check(JNIEnv *env, const char *what, int rc)
{
	if (rc < 0)
		throw_ush(env, what, rc, ush_last_error());
	return rc;
}

/* A Java string's UTF-8 copy, or NULL for a null string; *ok = 0 on OOM. */
static char *jstr(JNIEnv *env, jstring s, int *ok)
{
	*ok = 1;
	if (!s)
		return NULL;
	const char *u = (*env)->GetStringUTFChars(env, s, NULL);
	if (!u) {
		*ok = 0;
		return NULL;
	}
	char *c = strdup(u);
	(*env)->ReleaseStringUTFChars(env, s, u);
	if (!c) {
		*ok = 0;
		throw_ush(env, "native", -ENOMEM, NULL);
	}
	return c;
}

#define JFN(name) Java_org_apache_spark_shuffle_ushuffle_Native_##name

JNIEXPORT jstring JNICALL JFN(version)(JNIEnv *env, jclass cls)
{
	(void)cls;
	return (*env)->NewStringUTF(env, ush_version_string());
}

JNIEXPORT void JNICALL JFN(authSecret)(JNIEnv *env, jclass cls, jstring app,
				       jbyteArray secret)
{
	(void)cls;
	int ok;
	char *a = jstr(env, app, &ok);
	if (!ok)
		return;
	jsize n = (*env)->GetArrayLength(env, secret);
	jbyte *b = (*env)->GetByteArrayElements(env, secret, NULL);
	if (b) {
		check(env, "application secret",
		      ush_auth_secret(a, b, (size_t)n));
		(*env)->ReleaseByteArrayElements(env, secret, b, JNI_ABORT);
	}
	free(a);
}

/* ------------------------------------------------------------- seal keys */

struct keys {
	struct ush_seal_key k[USH_SEAL_KEYS_MAX];
	int n;
};

static int keys_load(JNIEnv *env, jstring path, struct keys *ks)
{
	int ok;
	ks->n = 0;
	char *p = jstr(env, path, &ok);
	if (!ok)
		return -1;
	if (!p)
		return 0;
	ks->n = ush_seal_keys_load(p, ks->k, USH_SEAL_KEYS_MAX);
	free(p);
	if (ks->n < 0) {
		check(env, "spark.ushuffle.seal.keyFile", ks->n);
		return -1;
	}
	return 0;
}

/* ----------------------------------------------------------------- writer */

struct jw {
	ush_ring *ring;
	ush_writer *w;
	size_t cap;
	struct keys keys;
};

static void jw_free(struct jw *j)
{
	if (!j)
		return;
	ush_writer_free(j->w);
	ush_ring_free(j->ring);
	explicit_bzero(&j->keys, sizeof(j->keys));
	free(j);
}

JNIEXPORT jlong JNICALL JFN(writerOpen)(JNIEnv *env, jclass cls,
	jint shuffle, jint map, jint attempt, jint partitions,
	jstring workers, jstring app, jint replicas, jstring codec,
	jlong pool_bytes, jlong push_size, jint timeout_ms, jint ioengine,
	jstring key_file)
{
	(void)cls;
	struct ush_ring_opts ro;
	struct ush_writer_opts wo;
	int ok, rc;
	char *wk = NULL, *ap = NULL, *cd = NULL;
	struct jw *j = calloc(1, sizeof(*j));
	if (!j) {
		throw_ush(env, "native", -ENOMEM, NULL);
		return 0;
	}
	ush_ring_opts_init(&ro);
	ush_writer_opts_init(&wo);
	wk = jstr(env, workers, &ok);
	if (!ok)
		goto fail;
	if (!wk) {
		throw_ush(env, "writer", -EINVAL, "no workers");
		goto fail;
	}
	ap = jstr(env, app, &ok);
	if (!ok)
		goto fail;
	cd = jstr(env, codec, &ok);
	if (!ok)
		goto fail;
	if (cd && ush_codec_parse(cd, &ro.codec, &ro.level) < 0) {
		throw_ush(env, "spark.ushuffle.codec", -EINVAL,
			  "not one of none, lz4, zstd, zstd:LEVEL");
		goto fail;
	}
	if (keys_load(env, key_file, &j->keys) < 0)
		goto fail;
	ro.pool_bytes = (size_t)pool_bytes;
	ro.push_size = (size_t)push_size;
	if (check(env, "ring", ush_ring_create(&j->ring, &ro)) < 0)
		goto fail;
	wo.shuffle = (uint32_t)shuffle;
	wo.map = (uint32_t)map;
	wo.attempt = (uint32_t)attempt;
	wo.partitions = (uint32_t)partitions;
	wo.target = USH_TARGET_NET;
	wo.workers = wk;
	wo.app = ap;
	wo.replicas = (uint32_t)replicas;
	wo.timeout_ms = (uint32_t)timeout_ms;
	wo.ioengine = ioengine ? USH_IOENGINE_PSYNC : USH_IOENGINE_URING;
	wo.seal_key = j->keys.n > 0 ? &j->keys.k[0] : NULL;
	rc = ush_writer_open(&j->w, j->ring, &wo);
	if (check(env, "writer", rc) < 0)
		goto fail;
	free(wk);
	free(ap);
	free(cd);
	return (jlong)(intptr_t)j;
fail:
	free(wk);
	free(ap);
	free(cd);
	jw_free(j);
	return 0;
}

static struct jw *JW(jlong h)
{
	return (struct jw *)(intptr_t)h;
}

/* Lends an idle push buffer: a direct ByteBuffer over its payload area. */
JNIEXPORT jobject JNICALL JFN(acquire)(JNIEnv *env, jclass cls, jlong h)
{
	(void)cls;
	struct jw *j = JW(h);
	void *buf;
	size_t cap;
	if (check(env, "acquire", ush_writer_acquire(j->w, &buf, &cap)) < 0)
		return NULL;
	j->cap = cap;
	return (*env)->NewDirectByteBuffer(env, buf, (jlong)cap);
}

/* Hands buf's first len bytes (nrecords records) to partition and lends a
 * fresh buffer of the same capacity in its place. */
JNIEXPORT jobject JNICALL JFN(swap)(JNIEnv *env, jclass cls, jlong h,
				    jint partition, jobject buf, jint len,
				    jint nrecords)
{
	(void)cls;
	struct jw *j = JW(h);
	void *p = (*env)->GetDirectBufferAddress(env, buf);
	int rc = ush_writer_swap(j->w, (uint32_t)partition, &p, (size_t)len,
				 (uint32_t)nrecords);
	if (check(env, "swap", rc) < 0)
		return NULL;
	return (*env)->NewDirectByteBuffer(env, p, (jlong)j->cap);
}

JNIEXPORT void JNICALL JFN(release)(JNIEnv *env, jclass cls, jlong h,
				    jobject buf)
{
	(void)cls;
	void *p = (*env)->GetDirectBufferAddress(env, buf);
	check(env, "release", ush_writer_release(JW(h)->w, p));
}

/* A record larger than a push buffer: copied in, framed alone. */
JNIEXPORT void JNICALL JFN(writeRecord)(JNIEnv *env, jclass cls, jlong h,
					jint partition, jbyteArray rec,
					jint off, jint len)
{
	(void)cls;
	/* Not a critical region: the write may wait for completions. */
	jbyte *b = (*env)->GetByteArrayElements(env, rec, NULL);
	if (!b)
		return;
	int rc = ush_writer_write(JW(h)->w, (uint32_t)partition, b + off,
				  (size_t)len);
	(*env)->ReleaseByteArrayElements(env, rec, b, JNI_ABORT);
	check(env, "write", rc);
}

/* Commits; fills bytes[] with each partition's record bytes; returns the
 * map status. */
JNIEXPORT jbyteArray JNICALL JFN(commit)(JNIEnv *env, jclass cls, jlong h,
					 jlongArray bytes)
{
	(void)cls;
	struct jw *j = JW(h);
	jsize n = (*env)->GetArrayLength(env, bytes);
	size_t m = n ? (size_t)n : 1;
	struct ush_part_stats *ps = calloc(m, sizeof(*ps));
	jlong *tmp = malloc(m * sizeof(*tmp));
	struct ush_status st;
	jbyteArray out = NULL;
	if (!ps || !tmp) {
		throw_ush(env, "commit", -ENOMEM, NULL);
		goto done;
	}
	if (check(env, "commit", ush_writer_commit(j->w, ps)) < 0 ||
	    check(env, "status", ush_writer_status(j->w, &st)) < 0)
		goto done;
	for (jsize i = 0; i < n; i++)
		tmp[i] = (jlong)ps[i].bytes;
	(*env)->SetLongArrayRegion(env, bytes, 0, n, tmp);
	out = (*env)->NewByteArray(env, (jsize)st.len);
	if (out)
		(*env)->SetByteArrayRegion(env, out, 0, (jsize)st.len,
					   (const jbyte *)st.data);
done:
	free(ps);
	free(tmp);
	return out;
}

/* Frame bytes stored so far (Spark's bytes written). */
JNIEXPORT jlong JNICALL JFN(writerStoredBytes)(JNIEnv *env, jclass cls,
					       jlong h)
{
	(void)env;
	(void)cls;
	struct ush_writer_stats st;
	ush_writer_stats(JW(h)->w, &st);
	return (jlong)st.frame_bytes;
}

JNIEXPORT void JNICALL JFN(writerFree)(JNIEnv *env, jclass cls, jlong h)
{
	(void)env;
	(void)cls;
	jw_free(JW(h));
}

/* ----------------------------------------------------------------- reader */

JNIEXPORT jlong JNICALL JFN(readerOpen)(JNIEnv *env, jclass cls,
	jobjectArray statuses, jint partition, jint npartitions,
	jint timeout_ms, jstring key_file)
{
	(void)cls;
	jsize n = (*env)->GetArrayLength(env, statuses);
	struct ush_status *st = calloc((size_t)n ? (size_t)n : 1, sizeof(*st));
	jbyte **mem = calloc((size_t)n ? (size_t)n : 1, sizeof(*mem));
	struct keys ks = { .n = 0 };
	struct ush_reader_opts o;
	ush_reader *r = NULL;
	if (!st || !mem) {
		throw_ush(env, "reader", -ENOMEM, NULL);
		goto done;
	}
	if (keys_load(env, key_file, &ks) < 0)
		goto done;
	for (jsize i = 0; i < n; i++) {
		jbyteArray a = (*env)->GetObjectArrayElement(env, statuses, i);
		jsize len = (*env)->GetArrayLength(env, a);
		mem[i] = malloc(len ? (size_t)len : 1);
		if (!mem[i]) {
			throw_ush(env, "reader", -ENOMEM, NULL);
			goto done;
		}
		(*env)->GetByteArrayRegion(env, a, 0, len, mem[i]);
		(*env)->DeleteLocalRef(env, a);
		st[i].data = mem[i];
		st[i].len = (size_t)len;
	}
	ush_reader_opts_init(&o);
	o.partition = (uint32_t)partition;
	o.npartitions = (uint32_t)npartitions;
	o.statuses = st;
	o.nstatuses = (uint32_t)n;
	o.timeout_ms = (uint32_t)timeout_ms;
	o.seal_keys = ks.n > 0 ? ks.k : NULL;
	o.nseal_keys = (uint32_t)(ks.n > 0 ? ks.n : 0);
	check(env, "reader", ush_reader_open(&r, &o));
done:
	explicit_bzero(&ks, sizeof(ks));
	for (jsize i = 0; mem && i < n; i++)
		free(mem[i]);
	free(mem);
	free(st);
	return (jlong)(intptr_t)r;
}

/* The next record as a direct ByteBuffer (valid until the next call), or
 * null at the end. */
JNIEXPORT jobject JNICALL JFN(readerNext)(JNIEnv *env, jclass cls, jlong h)
{
	(void)cls;
	const void *rec;
	size_t len;
	int rc = ush_reader_next((ush_reader *)(intptr_t)h, &rec, &len);
	if (check(env, "read", rc) <= 0)
		return NULL;
	/* A zero-length record still needs an address the JVM accepts. */
	static char empty;
	return (*env)->NewDirectByteBuffer(env, len ? (void *)rec : &empty,
					   (jlong)len);
}

/* {records, raw bytes, stored bytes, failovers} so far. */
JNIEXPORT jlongArray JNICALL JFN(readerStats)(JNIEnv *env, jclass cls,
					      jlong h)
{
	(void)cls;
	struct ush_reader_stats st;
	ush_reader_stats((ush_reader *)(intptr_t)h, &st);
	jlong v[4] = { (jlong)st.records, (jlong)st.raw_bytes,
		       (jlong)st.stored_bytes, (jlong)st.failovers };
	jlongArray a = (*env)->NewLongArray(env, 4);
	if (a)
		(*env)->SetLongArrayRegion(env, a, 0, 4, v);
	return a;
}

JNIEXPORT void JNICALL JFN(readerFree)(JNIEnv *env, jclass cls, jlong h)
{
	(void)env;
	(void)cls;
	ush_reader_free((ush_reader *)(intptr_t)h);
}

/* -------------------------------------------------------------- lifetimes */

/* The worker list and application id of a lifetime call, or 0 with an
 * exception pending; the caller frees both. */
static int workers_app(JNIEnv *env, jstring workers, jstring app, char **w,
		       char **a)
{
	int ok = 0;
	*a = NULL;
	*w = jstr(env, workers, &ok);
	if (ok)
		*a = jstr(env, app, &ok);
	return ok;
}

JNIEXPORT void JNICALL JFN(heartbeat)(JNIEnv *env, jclass cls,
				      jstring workers, jstring app)
{
	(void)cls;
	char *w, *a;
	if (workers_app(env, workers, app, &w, &a))
		check(env, "heartbeat", ush_app_heartbeat(w, a, 0));
	free(w);
	free(a);
}

JNIEXPORT void JNICALL JFN(drop)(JNIEnv *env, jclass cls, jstring workers,
				 jstring app, jint shuffle)
{
	(void)cls;
	char *w, *a;
	if (workers_app(env, workers, app, &w, &a))
		check(env, "drop", ush_shuffle_drop(w, a, (uint32_t)shuffle, 0));
	free(w);
	free(a);
}

JNIEXPORT jint JNICALL JFN(workersCheck)(JNIEnv *env, jclass cls,
					 jstring workers)
{
	(void)cls;
	int ok;
	char *w = jstr(env, workers, &ok);
	int rc = ok ? check(env, "spark.ushuffle.workers",
			    ush_workers_check(w, 1)) : 0;
	free(w);
	return rc;
}

/* --------------------------------------------------------- embedded worker */

/* Starts a worker in this process (the driver's, for local and
 * local-cluster runs) listening on listen, storing under dir; secret is
 * the one its clients prove. */
JNIEXPORT jlong JNICALL JFN(workerStart)(JNIEnv *env, jclass cls,
					 jstring listen, jstring dir,
					 jbyteArray secret, jint threads)
{
	(void)cls;
	int ok1, ok2 = 0, rc;
	struct ush_worker_opts o;
	ush_worker *w = NULL;
	jbyte *s = NULL;
	jsize n = 0;
	char *l = jstr(env, listen, &ok1), *d = NULL;
	if (ok1)
		d = jstr(env, dir, &ok2);
	if (!ok1 || !ok2)
		goto done;
	n = (*env)->GetArrayLength(env, secret);
	s = (*env)->GetByteArrayElements(env, secret, NULL);
	if (!s)
		goto done;
	ush_worker_opts_init(&o);
	o.listen = l;
	o.dir = d;
	o.threads = (unsigned)threads;
	o.secret = s;
	o.secret_len = (size_t)n;
	o.log_level = 0;
	rc = ush_worker_create(&w, &o);
	if (rc == 0)
		rc = ush_worker_start(w);
	if (rc < 0) {
		throw_ush(env, "embedded ushuffled", rc,
			  ush_worker_last_error());
		ush_worker_free(w);
		w = NULL;
	}
done:
	if (s)
		(*env)->ReleaseByteArrayElements(env, secret, s, JNI_ABORT);
	free(l);
	free(d);
	return (jlong)(intptr_t)w;
}

JNIEXPORT jint JNICALL JFN(workerPort)(JNIEnv *env, jclass cls, jlong h)
{
	(void)env;
	(void)cls;
	return ush_worker_port((ush_worker *)(intptr_t)h);
}

JNIEXPORT void JNICALL JFN(workerStop)(JNIEnv *env, jclass cls, jlong h)
{
	(void)env;
	(void)cls;
	ush_worker_free((ush_worker *)(intptr_t)h);
}
