/*
 * Writes a small shuffle (2 maps x 16 partitions) to a spill directory
 * through the public API, reads every partition back and checks that each
 * record arrives exactly once with its content intact.
 *
 * It is its own driver: each map's commit yields a map status, and the
 * readers read exactly the attempts those statuses name. Run again in the
 * same directory, each map's earlier attempts are committed already, so
 * it writes the next attempt number (as an engine relaunching a task).
 *
 *   ush_example [DIR]      (default: ./ushuffle-example)
 */
#include <ushuffle/ushuffle.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAPS = 2, PARTS = 16, RECORDS = 20000 };

static size_t make_record(char *buf, unsigned map, unsigned i)
{
	return (size_t)snprintf(buf, 128, "map %u record %u %.*s", map, i,
				(int)(i % 64), "................................"
					       "................................");
}

static int die(const char *what)
{
	fprintf(stderr, "ush_example: %s: %s\n", what, ush_last_error());
	return 1;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "./ushuffle-example";
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.codec = USH_CODEC_LZ4;
	ush_ring *ring;
	if (ush_ring_create(&ring, &ro))
		return die("ring");
	char rec[128];
	struct ush_status status[MAPS];
	for (unsigned m = 0; m < MAPS; m++) {
		struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = 1,
			.map = m, .partitions = PARTS,
			.target = USH_TARGET_DISK, .dir = dir, .direct = 1};
		ush_writer *w;
		int ret;
		while ((ret = ush_writer_open(&w, ring, &wo)) == USH_ECOMMITTED)
			wo.attempt++;
		if (ret)
			return die("writer open");
		for (unsigned i = 0; i < RECORDS; i++)
			if (ush_writer_write(w, i % PARTS, rec,
					     make_record(rec, m, i)))
				return die("write");
		struct ush_status st;
		if (ush_writer_commit(w, NULL) || ush_writer_status(w, &st))
			return die("commit");
		/* The status is the writer's until it is freed: keep a copy,
		 * as a driver receiving it from a task would. */
		status[m].data = memcpy(malloc(st.len), st.data, st.len);
		status[m].len = st.len;
		struct ush_writer_stats ws;
		ush_writer_stats(w, &ws);
		printf("map %u attempt %u: %llu records, %llu batches, %llu raw "
		       "bytes -> %llu stored, status %zu bytes\n", m,
		       wo.attempt, (unsigned long long)ws.records,
		       (unsigned long long)ws.batches,
		       (unsigned long long)ws.raw_bytes,
		       (unsigned long long)ws.stored_bytes, st.len);
		ush_writer_free(w);
	}
	ush_ring_free(ring);

	unsigned long total = 0;
	char *seen = calloc(MAPS * RECORDS, 1);
	for (unsigned p = 0; p < PARTS; p++) {
		struct ush_reader_opts o = {.size = sizeof(o), .partition = p,
			.statuses = status, .nstatuses = MAPS};
		ush_reader *r;
		const void *data;
		size_t len;
		int ret;
		if (ush_reader_open(&r, &o))
			return die("reader open");
		while ((ret = ush_reader_next(r, &data, &len)) == 1) {
			unsigned m, i;
			if (sscanf(data, "map %u record %u", &m, &i) != 2 ||
			    m >= MAPS || i >= RECORDS || i % PARTS != p ||
			    len != make_record(rec, m, i) ||
			    memcmp(rec, data, len) || seen[m * RECORDS + i]++) {
				fprintf(stderr, "ush_example: bad record in "
					"partition %u\n", p);
				return 1;
			}
			total++;
		}
		if (ret < 0)
			return die("read");
		ush_reader_free(r);
	}
	free(seen);
	for (unsigned m = 0; m < MAPS; m++)
		free((void *)status[m].data);
	printf("read back %lu of %u records: %s\n", total, MAPS * RECORDS,
	       total == MAPS * RECORDS ? "OK" : "MISSING");
	return total == MAPS * RECORDS ? 0 : 1;
}
