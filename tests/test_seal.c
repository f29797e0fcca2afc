/*
 * Sealed frames on the disk target (docs/security.md, "Sealed frames"):
 * records written under a data key are nowhere in plain text in the
 * spill file, read back whole with the key, and every forgery that
 * keeps the CRC32C right is refused before a record of it is yielded:
 * any bit flipped, a frame moved to another partition or map, a frame of
 * another attempt replayed; a wrong key, a missing key and a plain map
 * where sealing is required fail with clear errors. Key files: good
 * ones, and every rejection naming file and line.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/frame.h"
#include "core/seal.h"
#include "core/spill.h"

#include "core/status.h"

#include <errno.h>
#include <sched.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHUFFLE 3
#define NPARTS 4
#define NREC 40
#define RECLEN 200
/* Every record starts with it, so a plain copy anywhere is found. */
static const char MARK[] = "SEAL-TEST-PLAINTEXT-MARK:";

static const struct ush_seal_key KEY = {
	.id = 7,
	.key = "0123456789abcdef0123456789abcde",
};

/* Record i of (map, partition): MARK, then deterministic bytes. */
static void rec_of(uint8_t *b, uint32_t map, uint32_t p, uint32_t i)
{
	memcpy(b, MARK, sizeof(MARK) - 1);
	th_fill(b + sizeof(MARK) - 1, RECLEN - (sizeof(MARK) - 1),
		(uint64_t)map << 32 | p << 16 | i);
}

/* Writes map (attempt) of NPARTS partitions into dir, records into the
 * first nonempty of them, sealed under key unless it is NULL; its
 * status into *st. */
static void write_some(const char *dir, enum ush_codec codec, uint32_t map,
		       uint32_t attempt, const struct ush_seal_key *key,
		       uint32_t nonempty, struct ush_status *st)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = 4096; /* several frames per partition */
	ro.pool_bytes = 1u << 20;
	ro.codec = codec;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	struct ush_writer_opts wo;
	ush_writer_opts_init(&wo);
	wo.shuffle = SHUFFLE;
	wo.map = map;
	wo.attempt = attempt;
	wo.partitions = NPARTS;
	wo.target = USH_TARGET_DISK;
	wo.dir = dir;
	wo.direct = 0; /* frames back to back: the tests edit them */
	wo.seal_key = key;
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	uint8_t rec[RECLEN];
	for (uint32_t i = 0; i < NREC; i++)
		for (uint32_t p = 0; p < nonempty; p++) {
			rec_of(rec, map, p, i);
			th_ok(ush_writer_write(w, p, rec, sizeof(rec)));
		}
	th_ok(th_commit(w, NULL, st));
	ush_writer_free(w);
	ush_ring_free(ring);
}

/* write_some() into every partition. */
static void write_map(const char *dir, enum ush_codec codec, uint32_t map,
		      uint32_t attempt, const struct ush_seal_key *key,
		      struct ush_status *st)
{
	write_some(dir, codec, map, attempt, key, NPARTS, st);
}

/* Reads partition p over n statuses with the keys given; returns the
 * reader's result (open's or the first failing next's), the records
 * read in *got (each checked), its message in msg. */
static int read_part(const struct ush_status *st, uint32_t n, uint32_t p,
		     const struct ush_seal_key *keys, uint32_t nkeys,
		     uint32_t require, uint32_t *got, char *msg, size_t len)
{
	struct ush_reader_opts o;
	ush_reader_opts_init(&o);
	o.partition = p;
	o.statuses = st;
	o.nstatuses = n;
	o.seal_keys = keys;
	o.nseal_keys = nkeys;
	o.require_sealed = require;
	ush_reader *r;
	*got = 0;
	msg[0] = 0;
	int ret = ush_reader_open(&r, &o);
	if (ret) {
		snprintf(msg, len, "%s", ush_last_error());
		return ret;
	}
	const void *rec;
	size_t rlen;
	uint8_t want[RECLEN];
	while ((ret = ush_reader_next(r, &rec, &rlen)) == 1) {
		uint32_t map = 0, i = 0;
		bool found = false;
		/* Maps are read in id order, each in record order. */
		for (map = 0; !found && map < 4; map++)
			for (i = 0; !found && i < NREC; i++) {
				rec_of(want, map, p, i);
				found = rlen == RECLEN && !memcmp(rec, want, rlen);
			}
		if (!found)
			fail_msg("record %u of partition %u is not one written",
				 *got, p);
		(*got)++;
	}
	if (ret < 0)
		snprintf(msg, len, "%s", ush_last_error());
	ush_reader_free(r);
	return ret;
}

/* The spill file of (map, attempt) in dir, whole, and its index. */
struct spill {
	char path[PATH_MAX];
	uint8_t *data;
	size_t len;
	struct spill_header h;
	struct spill_entry *ents;
	size_t n;
};

static void spill_load(struct spill *s, const char *dir, uint32_t map,
		       uint32_t attempt)
{
	char index[PATH_MAX];
	spill_data(s->path, sizeof(s->path), dir, SHUFFLE, map, attempt);
	spill_index(index, sizeof(index), dir, SHUFFLE, map, attempt);
	s->data = th_read_file(s->path, &s->len);
	th_index_load(index, &s->h, &s->ents, &s->n);
}

static void spill_free(struct spill *s)
{
	free(s->data);
	free(s->ents);
}

static void spill_store(const struct spill *s, const uint8_t *data)
{
	th_write_file(s->path, data, s->len);
}

/* The k-th frame of partition p in s: its entry. */
static const struct spill_entry *frame_at(const struct spill *s, uint32_t p,
					  uint32_t k)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->ents[i].partition == p && !k--)
			return &s->ents[i];
	fail_msg("partition %u has no frame %u", p, k);
	return NULL;
}

/* What a forger without the key can do: set the CRC right again, over
 * the payload length the header says (when it lies within len). */
static void refit_crc(uint8_t *frame, size_t len)
{
	struct ushi_frame f = {.payload_len = get_le32(frame + 36)};
	if (f.payload_len <= len - USH_FRAME_HDR_SIZE)
		frame_put_crc(frame, &f);
}

static bool contains(const uint8_t *p, size_t n, const char *s)
{
	return memmem(p, n, s, strlen(s)) != NULL;
}

/* Sealed maps read back whole; their spill files hold no plain record
 * (the same records written plain do: the search can fail), and the
 * statuses name the key id. */
static void sealed_roundtrip(void **state)
{
	(void)state;
	static const enum ush_codec codecs[] = {USH_CODEC_NONE, USH_CODEC_LZ4,
						USH_CODEC_ZSTD};
	const char *top = th_scratch("seal");
	for (size_t c = 0; c < 3; c++) {
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%s/c%zu", top, c);
		assert_int_equal(mkdir(dir, 0755), 0);
		struct ush_status st[2];
		write_map(dir, codecs[c], 0, 0, &KEY, &st[0]);
		write_map(dir, codecs[c], 1, 0, NULL, &st[1]);
		struct spill sealed, plain;
		spill_load(&sealed, dir, 0, 0);
		spill_load(&plain, dir, 1, 0);
		assert_false(contains(sealed.data, sealed.len, MARK));
		/* Incompressible tails: even the plain lz4/zstd file shows
		 * its records' marks. */
		assert_true(contains(plain.data, plain.len, MARK));
		struct ush_status_info info;
		th_ok(ush_status_info(&st[0], &info));
		assert_int_equal(info.sealed, 1);
		assert_int_equal(info.seal_key_id, KEY.id);
		th_ok(ush_status_info(&st[1], &info));
		assert_int_equal(info.sealed, 0);
		char msg[512];
		uint32_t got;
		for (uint32_t p = 0; p < NPARTS; p++) {
			int ret = read_part(st, 2, p, &KEY, 1, 0, &got, msg,
					    sizeof(msg));
			if (ret)
				fail_msg("codec %d partition %u: %s", codecs[c],
					 p, msg);
			assert_int_equal(got, 2 * NREC);
		}
		/* Requiring sealing refuses the plain map at open. */
		assert_int_equal(read_part(st, 2, 0, &KEY, 1, 1, &got, msg,
					   sizeof(msg)), -EPERM);
		assert_non_null(strstr(msg, "requires sealed"));
		th_ok(read_part(st, 1, 0, &KEY, 1, 1, &got, msg, sizeof(msg)));
		assert_int_equal(got, NREC);
		spill_free(&sealed);
		spill_free(&plain);
		th_statuses_free(st, 2);
	}
}

/*
 * One bit flipped in every byte of a sealed frame (header before the
 * CRC, payload, key id, tag), the CRC set right again: the read fails
 * with USH_ECORRUPT (USH_EVERSION for the version byte) before any
 * record of that map.
 */
static void every_bit_flip_detected(void **state)
{
	(void)state;
	const char *dir = th_scratch("seal");
	struct ush_status st;
	write_map(dir, USH_CODEC_LZ4, 0, 0, &KEY, &st);
	struct spill s;
	spill_load(&s, dir, 0, 0);
	const struct spill_entry *e = frame_at(&s, 1, 0);
	uint8_t *copy = malloc(s.len);
	assert_non_null(copy);
	unsigned authfails = 0;
	for (uint32_t i = 0; i < e->len; i++) {
		if (i >= 44 && i < USH_FRAME_HDR_SIZE)
			continue; /* the CRC itself */
		memcpy(copy, s.data, s.len);
		copy[e->off + i] ^= (uint8_t)(1u << (i % 8));
		refit_crc(copy + e->off, e->len);
		spill_store(&s, copy);
		char msg[512];
		uint32_t got;
		int ret = read_part(&st, 1, 1, &KEY, 1, 0, &got, msg,
				    sizeof(msg));
		if (ret != (i == 4 ? USH_EVERSION : USH_ECORRUPT) || got)
			fail_msg("byte %u: %d (%s) after %u records: %s", i, ret,
				 ush_err_name(ret), got, msg);
		authfails += strstr(msg, "does not authenticate") != NULL;
	}
	/* The payload, the tag and the header fields that still parse
	 * fail the tag; the rest fail earlier checks. */
	assert_true(authfails >= e->len - USH_FRAME_HDR_SIZE - 4);
	spill_store(&s, s.data);
	char msg[512];
	uint32_t got;
	th_ok(read_part(&st, 1, 1, &KEY, 1, 0, &got, msg, sizeof(msg)));
	free(copy);
	spill_free(&s);
	th_status_free(&st);
}

/* Overwrites the frame at dst (in s's copy) with the frame at src,
 * renamed to dst's partition, map and attempt (CRC set right): a
 * well-formed frame in the wrong place. */
static void transplant(uint8_t *dst, const uint8_t *src, size_t len)
{
	struct ushi_frame want, f;
	th_ok(frame_parse(dst, &want));
	memcpy(dst, src, len);
	th_ok(frame_parse(dst, &f));
	f.partition = want.partition;
	f.map = want.map;
	f.attempt = want.attempt;
	f.seq = want.seq;
	frame_put(dst, &f);
	refit_crc(dst, len);
}

/* A sealed frame moved to another partition, map or attempt (renamed
 * there, CRC right) fails its tag: nothing of it is yielded. */
static void moved_frames_detected(void **state)
{
	(void)state;
	const char *dir = th_scratch("seal");
	struct ush_status st[3];
	/* Records of one length, no codec: frames of equal sizes. */
	write_map(dir, USH_CODEC_NONE, 0, 0, &KEY, &st[0]);
	write_map(dir, USH_CODEC_NONE, 1, 0, &KEY, &st[1]);
	write_map(dir, USH_CODEC_NONE, 1, 1, &KEY, &st[2]);
	struct spill m0, m1, m1a1;
	spill_load(&m0, dir, 0, 0);
	spill_load(&m1, dir, 1, 0);
	spill_load(&m1a1, dir, 1, 1);
	const struct spill_entry *e = frame_at(&m0, 1, 0);
	const struct {
		struct spill *into;
		const uint8_t *from;
		const char *what;
	} moves[] = {
		{&m0, m0.data + frame_at(&m0, 2, 0)->off, "partition"},
		{&m0, m1.data + frame_at(&m1, 1, 0)->off, "map"},
		{&m0, m1a1.data + frame_at(&m1a1, 1, 0)->off, "map, attempt"},
		{&m1a1, m1.data + frame_at(&m1, 1, 0)->off, "attempt"},
	};
	for (size_t i = 0; i < sizeof(moves) / sizeof(moves[0]); i++) {
		struct spill *s = moves[i].into;
		const struct spill_entry *d = frame_at(s, 1, 0);
		assert_int_equal(d->len, e->len);
		uint8_t *copy = malloc(s->len);
		assert_non_null(copy);
		memcpy(copy, s->data, s->len);
		transplant(copy + d->off, moves[i].from, d->len);
		spill_store(s, copy);
		/* Map 0 and attempt 1 of map 1 are what the driver chose. */
		const struct ush_status pick[2] = {st[0], st[2]};
		char msg[512];
		uint32_t got;
		int ret = read_part(pick, 2, 1, &KEY, 1, 0, &got, msg,
				    sizeof(msg));
		if (ret != USH_ECORRUPT || !strstr(msg, "does not authenticate"))
			fail_msg("frame from another %s: %d: %s",
				 moves[i].what, ret, msg);
		/* The other map read first may count; nothing of this one. */
		assert_true(got == 0 || got == NREC);
		spill_store(s, s->data);
		free(copy);
	}
	spill_free(&m0);
	spill_free(&m1);
	spill_free(&m1a1);
	th_statuses_free(st, 3);
}

/* A reader with the wrong key of the right id fails at the first
 * frame; without the key id at open, naming it. */
static void wrong_or_missing_key(void **state)
{
	(void)state;
	const char *dir = th_scratch("seal");
	struct ush_status st;
	write_map(dir, USH_CODEC_ZSTD, 0, 0, &KEY, &st);
	struct ush_seal_key wrong = KEY;
	wrong.key[5] ^= 1;
	char msg[512];
	uint32_t got;
	assert_int_equal(read_part(&st, 1, 0, &wrong, 1, 0, &got, msg,
				   sizeof(msg)), USH_ECORRUPT);
	assert_int_equal(got, 0);
	assert_non_null(strstr(msg, "does not authenticate"));
	assert_non_null(strstr(msg, "map 0 attempt 0"));
	struct ush_seal_key other = KEY;
	other.id = 8;
	assert_int_equal(read_part(&st, 1, 0, &other, 1, 0, &got, msg,
				   sizeof(msg)), -ENOKEY);
	assert_non_null(strstr(msg, "key id 7"));
	assert_int_equal(read_part(&st, 1, 0, NULL, 0, 0, &got, msg,
				   sizeof(msg)), -ENOKEY);
	assert_non_null(strstr(msg, "no key"));
	/* Rotation: the reader holds the old and the new key. */
	const struct ush_seal_key both[2] = {other, KEY};
	th_ok(read_part(&st, 1, 0, both, 2, 1, &got, msg, sizeof(msg)));
	assert_int_equal(got, NREC);
	th_status_free(&st);
}

/* A sealed map with nothing in the partition read: nothing to open, and
 * still the key is required. */
static void empty_partition(void **state)
{
	(void)state;
	const char *dir = th_scratch("seal-empty");
	struct ush_status st;
	write_some(dir, USH_CODEC_NONE, 0, 0, &KEY, 1, &st);
	char msg[512];
	uint32_t got;
	th_ok(read_part(&st, 1, 0, &KEY, 1, 1, &got, msg, sizeof(msg)));
	assert_int_equal(got, NREC);
	th_ok(read_part(&st, 1, NPARTS - 1, &KEY, 1, 1, &got, msg,
			sizeof(msg)));
	assert_int_equal(got, 0);
	assert_int_equal(read_part(&st, 1, NPARTS - 1, NULL, 0, 0, &got, msg,
				   sizeof(msg)), -ENOKEY);
	th_status_free(&st);
}

/* A sealed frame is what docs/format.md §1.6 says, checked with OpenSSL
 * directly: HKDF-SHA256 subkey from key, salt and the label, nonce from
 * partition and seq, header bytes 0..43 and key id as associated data. */
static void layout_as_documented(void **state)
{
	(void)state;
	const char *dir = th_scratch("seal");
	struct ush_status st;
	write_map(dir, USH_CODEC_NONE, 0, 5, &KEY, &st);
	struct status s;
	const char *why;
	th_ok(status_parse(st.data, st.len, &s, &why));
	assert_int_equal(s.version, 3);
	assert_true(s.sealed);
	assert_int_equal(s.seal_id, KEY.id);
	uint8_t info[64], sub[32];
	size_t n = 0;
	memcpy(info, "ushuffle seal v1", 17); /* with its NUL */
	n += 17;
	memcpy(info + n, "default", 7);
	n += 7;
	const uint32_t ids[3] = {SHUFFLE, 0, 5};
	for (int i = 0; i < 3; i++, n += 4)
		put_le32(info + n, ids[i]);
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	EVP_KDF_CTX *k = EVP_KDF_CTX_new(kdf);
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0),
		OSSL_PARAM_construct_octet_string("key", (void *)KEY.key, 32),
		OSSL_PARAM_construct_octet_string("salt", (void *)s.salt, 16),
		OSSL_PARAM_construct_octet_string("info", info, n),
		OSSL_PARAM_construct_end(),
	};
	assert_int_equal(EVP_KDF_derive(k, sub, sizeof(sub), p), 1);
	EVP_KDF_CTX_free(k);
	EVP_KDF_free(kdf);
	struct spill sp;
	spill_load(&sp, dir, 0, 5);
	const struct spill_entry *e = frame_at(&sp, 2, 1);
	const uint8_t *fr = sp.data + e->off;
	struct ushi_frame f;
	th_ok(frame_decode(fr, &f));
	th_ok(frame_check(fr, &f));
	assert_int_equal(f.flags, USHI_FRAME_SEALED);
	assert_int_equal(e->len, USH_FRAME_HDR_SIZE + f.raw_len + 20);
	const uint8_t *ct = fr + USH_FRAME_HDR_SIZE, *kid = ct + f.raw_len;
	assert_int_equal(get_le32(kid), KEY.id);
	uint8_t iv[12], *pt = malloc(f.raw_len + 16);
	put_le32(iv, 2);
	put_le64(iv + 4, 1);
	int m;
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	assert_int_equal(EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, sub,
					    iv), 1);
	assert_int_equal(EVP_DecryptUpdate(c, NULL, &m, fr, 44), 1);
	assert_int_equal(EVP_DecryptUpdate(c, NULL, &m, kid, 4), 1);
	assert_int_equal(EVP_DecryptUpdate(c, pt, &m, ct, (int)f.raw_len), 1);
	assert_int_equal(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16,
					     (void *)(kid + 4)), 1);
	assert_int_equal(EVP_DecryptFinal_ex(c, pt + m, &m), 1);
	EVP_CIPHER_CTX_free(c);
	/* The batch's records: partition 2's, from its second frame on. */
	assert_int_equal(get_le32(pt), RECLEN);
	assert_memory_equal(pt + 4, MARK, sizeof(MARK) - 1);
	th_ok(records_check(pt, f.raw_len, f.nrec));
	free(pt);
	spill_free(&sp);
	th_status_free(&st);
}

/* Writes text into a fresh key file (mode 0600) and loads it. */
static int load_text(const char *dir, const char *text,
		     struct ush_seal_key *keys, uint32_t max)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/key", dir);
	th_write_file(path, text, strlen(text));
	return ush_seal_keys_load(path, keys, max);
}

#define HEX64 "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF"

static void key_files(void **state)
{
	(void)state;
	const char *dir = th_scratch("sealkey");
	struct ush_seal_key k[4];
	assert_int_equal(load_text(dir, HEX64 "\n", k, 4), 1);
	assert_int_equal(k[0].id, 0);
	assert_int_equal(k[0].key[0], 0x00);
	assert_int_equal(k[0].key[1], 0x11);
	assert_int_equal(k[0].key[31], 0xff);
	assert_int_equal(load_text(dir, "# rotated 2026-12\n\n2 " HEX64
				   "\r\n1 " HEX64 "\n", k, 4), 2);
	assert_int_equal(k[0].id, 2);
	assert_int_equal(k[1].id, 1);
	const struct {
		const char *text, *why;
	} bad[] = {
		{"", "holds no key"},
		{"# nothing\n", "holds no key"},
		{"0011\n", "line 1: a key is 64 hex digits"},
		{HEX64 "00\n", "line 1: a key is 64 hex digits"},
		{"\n" HEX64 "\n1 0g" HEX64 "\n", "line 3: a key is 64"},
		{"1 zz" HEX64 "\n", "line 1: a key is 64"},
		{"1 " HEX64 "\n1 " HEX64 "\n", "line 2: a key id given twice"},
		{"x " HEX64 "\n", "line 1: the key id"},
		{"99999999999 " HEX64 "\n", "line 1: the key id"},
		{"1 " HEX64 "\n2 " HEX64 "\n3 " HEX64 "\n4 " HEX64 "\n5 " HEX64,
		 "line 5: more keys than"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret = load_text(dir, bad[i].text, k, 4);
		if (ret != -EINVAL || !strstr(ush_last_error(), bad[i].why) ||
		    !strstr(ush_last_error(), "/key"))
			fail_msg("case %zu: %d: %s", i, ret, ush_last_error());
	}
	/* The longest file loads; one byte more is refused. */
	static char longest[8192 + 2];
	memset(longest, '#', 8192);
	memcpy(longest, HEX64 "\n", 65);
	longest[8191] = '\n';
	assert_int_equal(load_text(dir, longest, k, 4), 1);
	memcpy(longest + 8191, "#\n", 3);
	assert_int_equal(load_text(dir, longest, k, 4), -EINVAL);
	assert_non_null(strstr(ush_last_error(), "longer than 8192 bytes"));
	char hexbad[80];
	snprintf(hexbad, sizeof(hexbad), "%.63sx\n", HEX64);
	assert_int_equal(load_text(dir, hexbad, k, 4), -EINVAL);
	assert_non_null(strstr(ush_last_error(), "not a hex digit"));
	assert_int_equal(ush_seal_keys_load(dir, k, 4), -EINVAL);
	assert_non_null(strstr(ush_last_error(), "not a regular file"));
	char none[PATH_MAX];
	snprintf(none, sizeof(none), "%s/absent", dir);
	assert_int_equal(ush_seal_keys_load(none, k, 4), -ENOENT);
	assert_non_null(strstr(ush_last_error(), none));
}

/* A ring of push buffers of 4 KiB, pool_bytes of them, on the disk. */
static ush_ring *small_ring(size_t pool_bytes)
{
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = 4096;
	ro.pool_bytes = pool_bytes;
	ro.codec = USH_CODEC_NONE;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	return ring;
}

static ush_writer *sealed_writer(ush_ring *ring, const char *dir,
				 uint32_t map)
{
	struct ush_writer_opts wo;
	ush_writer_opts_init(&wo);
	wo.shuffle = SHUFFLE;
	wo.map = map;
	wo.partitions = NPARTS;
	wo.target = USH_TARGET_DISK;
	wo.dir = dir;
	wo.seal_key = &KEY;
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	return w;
}

/* Fills buf with n records of partition p, from record i on; returns
 * the batch's bytes. */
static size_t fill_batch(uint8_t *buf, uint32_t map, uint32_t p, uint32_t i,
			 uint32_t n)
{
	size_t off = 0;
	for (uint32_t k = 0; k < n; k++, off += 4 + RECLEN) {
		put_le32(buf + off, RECLEN);
		rec_of(buf + off + 4, map, p, i + k);
	}
	return off;
}

/* Acquires a buffer of w and swaps nbatches full batches of map 0's
 * records into partition p, records 0.. in order; *buf is left lent.
 * Returns the records swapped. */
static uint32_t swap_batches(ush_writer *w, uint32_t p, uint32_t nbatches,
			     void **buf)
{
	size_t cap;
	th_ok(ush_writer_acquire(w, buf, &cap));
	uint32_t per = (uint32_t)(cap / (4 + RECLEN)), n = 0;
	for (uint32_t k = 0; k < nbatches; k++, n += per) {
		size_t len = fill_batch(*buf, 0, p, n, per);
		th_ok(ush_writer_swap(w, p, buf, len, per));
	}
	return n;
}

/*
 * Handed-off batches are sealed on the writer's sealer thread where the
 * process has several CPUs, inline where it has one: both read back
 * whole. NREC x 25 records in partition 0 make 50 batches of 4 KiB,
 * three flushes of the hand-off queue and a partial one at commit.
 */
static void sealed_on_either_thread(void **state)
{
	(void)state;
	const char *dir = th_scratch("seal");
	cpu_set_t all, one;
	assert_int_equal(sched_getaffinity(0, sizeof(all), &all), 0);
	CPU_ZERO(&one);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &all)) {
			CPU_SET(c, &one);
			break;
		}
	struct ush_status st[2];
	uint8_t rec[RECLEN];
	for (uint32_t map = 0; map < 2; map++) {
		/* Map 0 inline: the sealer is chosen at open. */
		if (map == 0)
			assert_int_equal(sched_setaffinity(0, sizeof(one),
							   &one), 0);
		ush_ring *ring = small_ring(1u << 20);
		ush_writer *w = sealed_writer(ring, dir, map);
		assert_int_equal(sched_setaffinity(0, sizeof(all), &all), 0);
		for (uint32_t i = 0; i < NREC * 25; i++) {
			rec_of(rec, map, 0, i % NREC);
			th_ok(ush_writer_write(w, 0, rec, sizeof(rec)));
		}
		th_ok(th_commit(w, NULL, &st[map]));
		ush_writer_free(w);
		ush_ring_free(ring);
	}
	char msg[512];
	uint32_t got;
	int ret = read_part(st, 2, 0, &KEY, 1, 1, &got, msg, sizeof(msg));
	if (ret)
		fail_msg("%s", msg);
	assert_int_equal(got, 2 * NREC * 25);
	th_statuses_free(st, 2);
}

/* Reads partition 1 of the sealed map st (KEY): records 0..n - 1 of map
 * 0 in order, nothing more; frees st. */
static void read_in_order(struct ush_status *st, uint32_t n)
{
	struct ush_reader_opts o;
	ush_reader_opts_init(&o);
	o.partition = 1;
	o.statuses = st;
	o.nstatuses = 1;
	o.seal_keys = &KEY;
	o.nseal_keys = 1;
	ush_reader *r;
	th_ok(ush_reader_open(&r, &o));
	const void *rec;
	size_t rlen;
	uint8_t want[RECLEN];
	uint32_t got = 0;
	int ret;
	for (; (ret = ush_reader_next(r, &rec, &rlen)) == 1; got++) {
		rec_of(want, 0, 1, got);
		assert_int_equal(rlen, RECLEN);
		assert_memory_equal(rec, want, RECLEN);
	}
	if (ret < 0)
		fail_msg("%s", ush_last_error());
	assert_int_equal(got, n);
	ush_reader_free(r);
	th_status_free(st);
}

/*
 * Swapped batches with a pool of 17 push buffers: one lent, the next 16
 * handed off and posted to the sealer, and nothing else in flight. The
 * next swap needs a buffer only the sealer's batch can give back, once
 * collected and written: the writer must collect it, not report an
 * exhausted pool.
 */
static void swap_waits_for_the_sealer(void **state)
{
	(void)state;
	const char *dir = th_scratch("seal");
	ush_ring *ring = small_ring(17 * 4096);
	ush_writer *w = sealed_writer(ring, dir, 0);
	void *buf;
	uint32_t n = swap_batches(w, 1, 60, &buf);
	th_ok(ush_writer_release(w, buf));
	struct ush_status st;
	th_ok(th_commit(w, NULL, &st));
	ush_writer_free(w);
	ush_ring_free(ring);
	read_in_order(&st, n);
}

/*
 * An abort while the sealer holds a batch gives every buffer back: a
 * writer on the same ring then lends all 17 of its pool.
 */
static void abort_while_sealing(void **state)
{
	(void)state;
	const char *dir = th_scratch("seal");
	ush_ring *ring = small_ring(17 * 4096);
	ush_writer *w = sealed_writer(ring, dir, 0);
	void *buf;
	size_t cap;
	swap_batches(w, 2, 16, &buf);
	th_ok(ush_writer_abort(w));
	ush_writer_free(w);
	w = sealed_writer(ring, dir, 1);
	for (int k = 0; k < 17; k++)
		th_ok(ush_writer_acquire(w, &buf, &cap));
	ush_writer_free(w);
	ush_ring_free(ring);
}

/*
 * A stage and a sealer in one writer: 10,000 partitions on a 1 MiB pool
 * stage their records, and 16 batches swapped into partition 1 go to the
 * sealer. The records staged after them carry higher sequence numbers:
 * the stage's flush (here the commit's) must wait for the sealer's batch
 * rather than send its frames first, or the reader finds a gap.
 */
static void staged_after_sealing(void **state)
{
	(void)state;
	const char *dir = th_scratch("seal");
	ush_ring *ring = small_ring(1u << 20);
	struct ush_writer_opts wo;
	ush_writer_opts_init(&wo);
	wo.shuffle = SHUFFLE;
	wo.partitions = 10000;
	wo.target = USH_TARGET_DISK;
	wo.dir = dir;
	wo.seal_key = &KEY;
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	void *buf;
	uint32_t n = swap_batches(w, 1, 16, &buf);
	th_ok(ush_writer_release(w, buf));
	uint8_t rec[RECLEN];
	for (uint32_t i = 0; i < 5; i++, n++) {
		rec_of(rec, 0, 1, n);
		th_ok(ush_writer_write(w, 1, rec, sizeof(rec)));
	}
	struct ush_status st;
	th_ok(th_commit(w, NULL, &st));
	ush_writer_free(w);
	ush_ring_free(ring);
	read_in_order(&st, n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(sealed_roundtrip, th_teardown),
		cmocka_unit_test_teardown(layout_as_documented, th_teardown),
		cmocka_unit_test_teardown(every_bit_flip_detected, th_teardown),
		cmocka_unit_test_teardown(moved_frames_detected, th_teardown),
		cmocka_unit_test_teardown(wrong_or_missing_key, th_teardown),
		cmocka_unit_test_teardown(empty_partition, th_teardown),
		cmocka_unit_test_teardown(key_files, th_teardown),
		cmocka_unit_test_teardown(sealed_on_either_thread, th_teardown),
		cmocka_unit_test_teardown(swap_waits_for_the_sealer,
					  th_teardown),
		cmocka_unit_test_teardown(abort_while_sealing, th_teardown),
		cmocka_unit_test_teardown(staged_after_sealing, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
