/*
 * The reader's parts. ush_reader (reader.c) parses the map statuses,
 * checks every frame a source gives it against them and yields the
 * records; a source reads the frames from where the statuses say they
 * are, behind one ops table as the writer's sinks: a spill directory's
 * files (source_disk.c) or the workers' FETCH streams (source_net.c).
 */
#ifndef USHI_READER_H
#define USHI_READER_H

#include "core/frame.h"
#include "core/ring.h"
#include "core/seal.h"
#include "core/status.h"

/* One map: the attempt its status names and what it says of the
 * partition being read, then what was read of it. */
struct rmap {
	struct status st;          /* parsed (a range's: of its copy; else
				      of the caller's, until open returns) */
	uint32_t map, attempt;
	uint32_t src;              /* where it lives: index into srcs, or
				      NO_SRC (an empty replicated one) */
	/* The workers holding it (into the net source's peers), tried in
	 * order; at: the one being read. */
	uint32_t holder[USH_REPLICAS_MAX];
	uint8_t nholders, at;
	uint8_t refused;           /* holders that said "not committed" */
	uint64_t expect;           /* batches, per the status */
	uint32_t want_sum;         /* their checksum, per the status */
	uint64_t got, next_seq;    /* batches read; lower seqs: duplicates */
	uint32_t sum;              /* running checksum of those read */
	/* Per batch taken (seq 0..got-1), to compare a duplicate with:
	 * its frame's CRC and offset in the file or the worker stream.
	 * 12 B per batch, grown as batches come (seen_room()), freed at
	 * the map's end. */
	uint64_t *offs;            /* NULL until its first batch */
	uint32_t *crcs;
	uint64_t seen_cap;         /* batches they have room for */
	/* Sealed, per its status: the key id its frames name and the
	 * subkey they open with. */
	bool sealed;
	uint32_t seal_id;
	uint8_t sub[USH_SEAL_KEY_SIZE];
};

#define NO_SRC UINT32_MAX

struct ush_reader;

struct ushi_source_ops {
	const char *name;
	/* Sets the source up for o's statuses: 0 or -errno. */
	int (*create)(struct ush_reader *r, const struct ush_reader_opts *o);
	/* Once the maps are parsed and sorted, before the first partition:
	 * plans the whole range (NULL: nothing to plan). 0 or an error. */
	int (*plan)(struct ush_reader *r);
	/* Where map m, of status s, is read from for partition
	 * r->partition: sets m->src (and what else the source keeps of
	 * it). Returns 0, -ENOMEM, or -EINVAL for a status whose places
	 * make no sense. */
	int (*add)(struct ush_reader *r, const struct status *s,
		   uint64_t mask, struct rmap *m);
	/* Once every map of partition r->partition is added: checks they
	 * can be read, starts. */
	int (*open)(struct ush_reader *r);
	/* Reads until reader_take() loaded a batch: 1, 0 when every map
	 * of the partition is read, or an error. */
	int (*next)(struct ush_reader *r);
	/* "PLACE offset off" of the source being read, for messages. */
	void (*describe)(struct ush_reader *r, uint64_t off, char *buf,
		      size_t n);
	/* In a fork() child, before destroy: what is in flight is the
	 * parent's (NULL: nothing is). */
	void (*forget)(struct ush_reader *r);
	void (*destroy)(struct ush_reader *r);
};

extern const struct ushi_source_ops ushi_source_disk, ushi_source_net;

struct ush_reader {
	uint32_t shuffle, partition, partitions; /* partition being read */
	uint32_t first, count;     /* the range [first, first + count) */
	uint8_t **sdata;           /* a range's statuses' bytes, copied */
	char app[USHI_STATUS_APP_MAX + 1]; /* the statuses' application */
	uint8_t target;
	const struct ushi_source_ops *source;
	void *source_state;
	struct rmap *maps;         /* ascending map ids */
	uint32_t nmaps;
	char **srcs;               /* the places maps live: spill directory
				      or worker */
	uint32_t nsrcs;
	size_t srcs_cap;
	/* The reader's own ring (ring_create_unbound(), freed with the
	 * reader): its codec contexts decompress every batch, and the disk
	 * source's reads run on it. A reader is not bound to a thread, as
	 * a ush_ring is, so it lends its ring to no one and borrows none. */
	struct ush_ring *ring;
	uint8_t *rbuf;             /* decompressed batch */
	size_t rcap;
	/* Sealed maps: the cipher context (made with the first one) and
	 * the opened, still compressed, payload. */
	struct ushi_seal seal;
	uint8_t *sbuf;
	size_t scap;
	const uint8_t *batch;      /* records being yielded */
	size_t blen, boff;
	int err;
	unsigned gen;              /* ushi_fork_gen at open */
	struct ush_reader_stats st;
	struct ush_lat load_lat;
};

/* Whether map m read whole agrees with its status; where names the
 * source for the message. */
int reader_check_map(const struct ush_reader *r, const struct rmap *m,
		     const char *where);
/* The map's batches are all read (or the read failed): what was kept to
 * compare duplicates with goes. */
void reader_map_done(struct rmap *m);
/*
 * Takes a frame of map m whose header and CRC were checked, at offset
 * off of the source being read: an identical duplicate is dropped, a
 * different one, a gap or an extra batch is an error; the batch is
 * decompressed and its records checked. Returns 1 when r->batch is
 * loaded, 0 for a duplicate, or an error naming the frame's place.
 */
int reader_take(struct ush_reader *r, struct rmap *m,
		const struct ushi_frame *f, const uint8_t *frame,
		uint64_t off, uint64_t t0);
/* The index in r->srcs of place loc (n bytes), added if new at or after
 * first: 0 or -ENOMEM. */
int reader_add_src(struct ush_reader *r, uint32_t first, const char *loc,
		   size_t n, uint32_t *idx);

#endif
