/*
 * A caller built against an older header (ushuffle_old.h: the structs of
 * release 0.USH_OLD_MINOR) runs on today's libushuffle.so: the library
 * reads only the fields it was given, never the junk such a caller may
 * leave in its structs' padding, fills nothing past the caller's
 * structs, and takes the defaults for the fields the caller has never
 * heard of. Also
 * the other direction: a struct from a newer header is accepted when the
 * fields this library does not know are zero, refused (-E2BIG) when not,
 * and a struct never initialised (size 0, or garbage) is refused
 * (-EINVAL).
 *
 * Plain C and exit codes, not cmocka: cmocka's header would pull in
 * nothing of ushuffle, but this program must see only the old layout.
 */
#include "ushuffle_old.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failed;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, \
				__LINE__, #cond, ush_last_error());          \
			failed = 1;                                          \
		}                                                            \
	} while (0)

/* A struct followed by canary bytes that the library must not touch. */
#define GUARDED(type)                                                        \
	struct {                                                             \
		type s;                                                      \
		unsigned char canary[64];                                    \
	}

static int canary_ok(const unsigned char *c)
{
	for (int i = 0; i < 64; i++)
		if (c[i] != 0xa5)
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/abi_old_caller.%d",
		 argc > 1 ? argv[1] : ".", (int)getpid());
	CHECK(ush_version() >= 300);

	GUARDED(struct ush_ring_opts) ro;
	memset(&ro, 0xa5, sizeof(ro));
	ush_ring_opts_init_size(&ro.s, sizeof(ro.s));
	CHECK(canary_ok(ro.canary));
	CHECK(ro.s.size == sizeof(ro.s));
	CHECK(ro.s.iodepth == 64 && ro.s.push_size == 64u << 10);
	CHECK(ro.s.level == 1);
	ro.s.codec = OLD_CODEC_ZSTD;
	ro.s.pool_bytes = 8u << 20;
	ush_ring *ring = NULL;
	CHECK(ush_ring_create(&ring, &ro.s) == 0);
	if (!ring)
		return 1;

	GUARDED(struct ush_ring_info) ri;
	memset(&ri, 0xa5, sizeof(ri));
	ush_ring_info_size(ring, &ri.s, sizeof(ri.s));
	CHECK(canary_ok(ri.canary));
	CHECK(ri.s.iodepth == 64 && ri.s.pool_bytes == 8u << 20);

	GUARDED(struct ush_writer_opts) wo;
	memset(&wo, 0xa5, sizeof(wo));
	ush_writer_opts_init_size(&wo.s, sizeof(wo.s));
	CHECK(canary_ok(wo.canary));
	wo.s.shuffle = 1;
	wo.s.partitions = 4;
	wo.s.target = OLD_TARGET_DISK;
	wo.s.dir = dir;
#if USH_OLD_MINOR >= 4
	/* Junk in the tail padding after replicas, as a struct copied by
	 * assignment may carry: today's library must not read it. */
	size_t end = offsetof(struct ush_writer_opts, replicas) +
		     sizeof(wo.s.replicas);
	memset((char *)&wo.s + end, 0xa5, sizeof(wo.s) - end);
#endif
	ush_writer *w = NULL;
	CHECK(ush_writer_open(&w, ring, &wo.s) == 0);
	char rec[100];
	for (int i = 0; w && i < 1000; i++) {
		memset(rec, 'a' + i % 26, sizeof(rec));
		CHECK(ush_writer_write(w, (uint32_t)i % 4, rec, sizeof(rec)) == 0);
	}
	struct ush_part_stats parts[4];
	CHECK(w && ush_writer_commit(w, parts) == 0);
	GUARDED(struct ush_writer_stats) ws;
	memset(&ws, 0xa5, sizeof(ws));
	if (w)
		ush_writer_stats_size(w, &ws.s, sizeof(ws.s));
	CHECK(canary_ok(ws.canary));
	CHECK(ws.s.size == sizeof(ws.s) && ws.s.records == 1000);
	/* The map status, copied: the writer's is borrowed until freed. */
	struct ush_status st = {NULL, 0}, bst;
	CHECK(w && ush_writer_status(w, &bst) == 0);
	if (w && bst.data && (st.data = malloc(bst.len))) {
		memcpy((void *)st.data, bst.data, bst.len);
		st.len = bst.len;
	}
	CHECK(st.data != NULL);
	ush_writer_free(w);

	/* A newer caller's larger struct: unknown fields zero, or not. */
	struct {
		struct ush_writer_opts s;
		uint64_t newer[4];
	} big;
	memset(&big, 0, sizeof(big));
	ush_writer_opts_init_size(&big.s, sizeof(big));
	CHECK(big.s.size == sizeof(big));
	big.s.shuffle = 1;
	big.s.map = 1;
	big.s.partitions = 4;
	big.s.target = OLD_TARGET_DISK;
	big.s.dir = dir;
	w = NULL;
	CHECK(ush_writer_open(&w, ring, &big.s) == 0);
	ush_writer_free(w);
	big.newer[3] = 1;
	w = NULL;
	CHECK(ush_writer_open(&w, ring, &big.s) == -E2BIG);
	CHECK(strstr(ush_last_error(), "does not know") != NULL);
	CHECK(w == NULL);
	/* Never initialised (designated initialisers leave size at 0). */
	struct ush_writer_opts bare = {.shuffle = 1, .partitions = 4};
	CHECK(ush_writer_open(&w, ring, &bare) == -EINVAL);
	CHECK(strstr(ush_last_error(), "_init()") != NULL);
	/* Never initialised on the stack: a garbage size is refused, not
	 * taken as a struct to scan past the caller's memory. */
	bare.size = 0xdeadbeef;
	CHECK(ush_writer_open(&w, ring, &bare) == -EINVAL);
	CHECK(strstr(ush_last_error(), "_init()") != NULL);

	/* Read back through the old reader layout (its timeout: default). */
	uint64_t n = 0;
	for (uint32_t p = 0; p < 4; p++) {
		GUARDED(struct ush_reader_opts) o;
		memset(&o, 0xa5, sizeof(o));
		ush_reader_opts_init_size(&o.s, sizeof(o.s));
		CHECK(canary_ok(o.canary));
		CHECK(o.s.size == sizeof(o.s) && o.s.partition == 0 &&
		      o.s.statuses == NULL && o.s.nstatuses == 0);
		o.s.partition = p;
		o.s.statuses = &st;
		o.s.nstatuses = 1;
		ush_reader *r = NULL;
		CHECK(ush_reader_open(&r, &o.s) == 0);
		const void *rp;
		size_t len;
		int ret;
		while (r && (ret = ush_reader_next(r, &rp, &len)) == 1) {
			CHECK(len == sizeof(rec));
			n++;
		}
		ush_reader_free(r);
	}
	CHECK(n == 1000);
	free((void *)st.data);
	ush_ring_free(ring);
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		failed = 1;
	printf("%s\n", failed ? "old caller: FAILED" : "old caller: ok");
	return failed;
}
