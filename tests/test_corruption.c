/*
 * Damaged spill files: after a normal committed write of two maps, damage
 * map 1's data file or index (flipped header byte, flipped payload byte,
 * truncation, missing data file or index, corrupt index header, directory
 * slot or entry, an entry dropped from a valid index, an index of another
 * version, a second frame of one seq with other records) and read partition 1 with the map
 * statuses the commits yielded. The reader
 * must return every record before the damage intact and in order, then an
 * error whose message names the file, the offset and the partition; never
 * a garbage record.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/frame.h"
#include "core/spill.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHUFFLE 5
#define NMAPS 2
#define NPARTS 4
#define PART 1
#define BAD_MAP 1
#define NREC_PART 60 /* partition PART's records per map */
#define NREC_OTHER 20
#define MAXF 64

static uint32_t rec_count(uint32_t part)
{
	return part == PART ? NREC_PART : NREC_OTHER;
}

static uint32_t rec_len(uint32_t map, uint32_t part, uint32_t i)
{
	return 100 + (map * 7 + part * 13 + i * 97) % 800;
}

/* Compressible bytes (a repeated 16-byte pattern) so codecs shrink them. */
static void rec_fill(uint8_t *buf, uint32_t len, uint64_t seed)
{
	uint32_t pat = len < 16 ? len : 16;
	th_fill(buf, pat, seed);
	for (uint32_t k = pat; k < len; k++)
		buf[k] = buf[k - pat];
}

struct fx {
	const char *dir;
	char data[PATH_MAX], index[PATH_MAX]; /* map BAD_MAP's files */
	uint8_t *pdata, *pindex;              /* their pristine bytes */
	size_t dlen, ilen, nidx;
	struct spill_header hdr;              /* the index's, parsed */
	struct spill_entry *idx;              /* its entries, in order */
	struct spill_entry ents[MAXF];        /* PART's frames in BAD_MAP */
	size_t gidx[MAXF];                    /* their index positions */
	uint32_t nrec[MAXF];
	size_t nents;
	struct spill_entry other;             /* a frame of partition 0 */
	struct ush_status st[NMAPS];          /* the maps' statuses */
	uint8_t rec[1024];
};

static void fx_setup(struct fx *fx, enum ush_codec codec, int direct)
{
	memset(fx, 0, sizeof(*fx));
	fx->dir = th_scratch("corrupt");
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ro.push_size = 4096; /* many small frames */
	ro.pool_bytes = 1u << 20;
	ro.codec = codec;
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro));
	for (uint32_t m = 0; m < NMAPS; m++) {
		struct ush_writer_opts wo = {.size = sizeof(wo),
			.shuffle = SHUFFLE, .map = m, .partitions = NPARTS,
			.target = USH_TARGET_DISK, .dir = fx->dir,
			.direct = direct};
		ush_writer *w;
		th_ok(ush_writer_open(&w, ring, &wo));
		/* Interleave partitions so their frames interleave. */
		for (uint32_t i = 0; i < NREC_PART; i++)
			for (uint32_t p = 0; p < NPARTS; p++) {
				if (i >= rec_count(p))
					continue;
				uint32_t len = rec_len(m, p, i);
				rec_fill(fx->rec, len, th_rec_seed(m, p, i));
				th_ok(ush_writer_write(w, p, fx->rec, len));
			}
		th_ok(th_commit(w, NULL, &fx->st[m]));
		ush_writer_free(w);
	}
	ush_ring_free(ring);

	spill_data(fx->data, sizeof(fx->data), fx->dir, SHUFFLE, BAD_MAP, 0);
	spill_index(fx->index, sizeof(fx->index), fx->dir, SHUFFLE, BAD_MAP,
		    0);
	fx->pdata = th_read_file(fx->data, &fx->dlen);
	fx->pindex = th_read_file(fx->index, &fx->ilen);
	th_index_load(fx->index, &fx->hdr, &fx->idx, &fx->nidx);
	for (size_t i = 0; i < fx->nidx; i++) {
		struct spill_entry e = fx->idx[i];
		if (e.partition == 0 && !fx->other.len)
			fx->other = e;
		if (e.partition != PART)
			continue;
		assert_true(fx->nents < MAXF);
		struct ushi_frame f;
		th_ok(frame_decode(fx->pdata + e.off, &f));
		if (codec != USH_CODEC_NONE)
			assert_int_equal(f.codec, codec);
		fx->gidx[fx->nents] = i;
		fx->nrec[fx->nents] = f.nrec;
		fx->ents[fx->nents++] = e;
	}
	/* The damaged frame (#2) has intact frames on both sides. */
	assert_true(fx->nents >= 5);
	assert_true(fx->other.len > 0);
}

static void fx_restore(struct fx *fx)
{
	th_write_file(fx->data, fx->pdata, fx->dlen);
	th_write_file(fx->index, fx->pindex, fx->ilen);
}

static void fx_teardown(struct fx *fx)
{
	free(fx->pdata);
	free(fx->pindex);
	free(fx->idx);
	th_statuses_free(fx->st, NMAPS);
	th_rmrf(fx->dir);
}

/* Records of PART before frame k of BAD_MAP: all of the maps before it,
 * then those of BAD_MAP's frames before k. */
static uint64_t before(const struct fx *fx, size_t k)
{
	uint64_t n = (uint64_t)BAD_MAP * NREC_PART;
	for (size_t i = 0; i < k; i++)
		n += fx->nrec[i];
	return n;
}

/*
 * Reads PART until the end or an error, checking that every record
 * returned is the next one written. Returns the final status, sets *n to
 * the records returned and copies the error message into msg.
 */
static int read_part(struct fx *fx, uint64_t *n, char *msg, size_t msglen)
{
	ush_reader *r;
	const void *rec;
	size_t len;
	int ret = th_reader_open(&r, fx->st, NMAPS, PART, 0);
	*n = 0;
	msg[0] = 0;
	if (ret) {
		snprintf(msg, msglen, "%s", ush_last_error());
		return ret;
	}
	while ((ret = ush_reader_next(r, &rec, &len)) == 1) {
		uint32_t m = (uint32_t)(*n / NREC_PART);
		uint32_t i = (uint32_t)(*n % NREC_PART);
		if (m >= NMAPS)
			fail_msg("record #%llu: more records than written",
				 (unsigned long long)*n);
		uint32_t wlen = rec_len(m, PART, i);
		rec_fill(fx->rec, wlen, th_rec_seed(m, PART, i));
		if (len != wlen || memcmp(rec, fx->rec, len))
			fail_msg("record #%llu (map %u record %u): %zu bytes "
				 "returned, %u written, or different bytes",
				 (unsigned long long)*n, m, i, len, wlen);
		(*n)++;
	}
	if (ret < 0) {
		snprintf(msg, msglen, "%s", ush_last_error());
		/* The error is sticky: no record after it either. */
		assert_int_equal(ush_reader_next(r, &rec, &len), ret);
	}
	ush_reader_free(r);
	return ret;
}

/* Expects error code err after exactly nbefore good records, with a
 * message holding "<path> offset <off> partition 1" (off < 0: the path
 * and the partition only). */
static void expect_error(struct fx *fx, int err, uint64_t nbefore,
			 const char *path, long long off, const char *what)
{
	char msg[600], needle[PATH_MAX + 64];
	uint64_t n;
	int ret = read_part(fx, &n, msg, sizeof(msg));
	if (ret != err)
		fail_msg("%s: reader returned %d (%s), expected %d (%s): %s",
			 what, ret, ush_err_name(ret), err, ush_err_name(err),
			 msg);
	if (n != nbefore)
		fail_msg("%s: %llu records before the error, expected %llu",
			 what, (unsigned long long)n,
			 (unsigned long long)nbefore);
	if (off >= 0)
		snprintf(needle, sizeof(needle), "%s offset %lld partition %u",
			 path, off, PART);
	else
		snprintf(needle, sizeof(needle), "%s", path);
	if (!strstr(msg, needle))
		fail_msg("%s: message \"%s\" lacks \"%s\"", what, msg, needle);
	if (off < 0 && err != USH_ENOTCOMMITTED) {
		snprintf(needle, sizeof(needle), "partition %u", PART);
		if (!strstr(msg, needle))
			fail_msg("%s: message \"%s\" lacks \"%s\"", what, msg,
				 needle);
	}
}

static void flip(const char *path, uint64_t off, uint8_t mask)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	uint8_t b;
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	b ^= mask;
	assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

static void check_pristine(struct fx *fx)
{
	char msg[600];
	uint64_t n;
	int ret = read_part(fx, &n, msg, sizeof(msg));
	if (ret)
		fail_msg("pristine read: %d: %s", ret, msg);
	assert_int_equal(n, NMAPS * NREC_PART);
}

/* One flipped bit in each field of frame #2's header. */
static void header_flips(struct fx *fx, enum ush_codec codec)
{
	const int comp = codec != USH_CODEC_NONE;
	const struct {
		unsigned off;
		int err;
		const char *what;
	} flips[] = {
		{0, USH_ECORRUPT, "magic"},
		{4, USH_EVERSION, "version"},
		{5, USH_ECORRUPT, "type"},
		{6, USH_ECORRUPT, "codec"},
		/* The sealed flag: a compressed payload stays long enough
		 * for its lengths to agree, so its CRC refuses it. */
		{7, comp ? USH_ECRC : USH_ECORRUPT, "flags"},
		{8, USH_ECORRUPT, "shuffle"},
		{12, USH_ECORRUPT, "map"},
		{16, USH_ECORRUPT, "attempt"},
		{20, USH_ECORRUPT, "partition"},
		{24, USH_ECRC, "sequence"},
		/* Raw and stored length agree without a codec. */
		{32, comp ? USH_ECRC : USH_ECORRUPT, "raw length"},
		{36, USH_ECORRUPT, "payload length"},
		{40, USH_ECRC, "record count"},
		{44, USH_ECRC, "crc"},
		{47, USH_ECRC, "crc high byte"},
	};
	const size_t k = 2;
	for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
		char what[64];
		snprintf(what, sizeof(what), "header %s", flips[i].what);
		flip(fx->data, fx->ents[k].off + flips[i].off, 0x01);
		expect_error(fx, flips[i].err, before(fx, k), fx->data,
			     (long long)fx->ents[k].off, what);
		fx_restore(fx);
	}
}

/* One flipped byte at the start, middle and end of a payload. */
static void payload_flips(struct fx *fx)
{
	for (size_t k = 0; k < fx->nents; k += fx->nents / 3) {
		uint32_t plen = fx->ents[k].len - USH_FRAME_HDR_SIZE;
		const uint32_t at[] = {0, plen / 2, plen - 1};
		for (size_t i = 0; i < 3; i++) {
			flip(fx->data, fx->ents[k].off + USH_FRAME_HDR_SIZE +
					       at[i],
			     0x80);
			expect_error(fx, USH_ECRC, before(fx, k), fx->data,
				     (long long)fx->ents[k].off,
				     "payload byte");
			fx_restore(fx);
		}
	}
}

static void truncations(struct fx *fx)
{
	const uint64_t sizes[] = {0, fx->ents[2].off + 100, fx->dlen - 1};
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(truncate(fx->data, (off_t)sizes[i]), 0);
		/* The whole map is refused before any of its records. */
		expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->data,
			     (long long)sizes[i], "truncated data file");
		fx_restore(fx);
	}
	/* A data file gone while its index stays. */
	assert_int_equal(unlink(fx->data), 0);
	expect_error(fx, -ENOENT, before(fx, 0), fx->data, -1,
		     "missing data file");
	fx_restore(fx);
}

/* The attempt a status names is not committed there: refused at open,
 * before any record of any map. */
static void missing_index(struct fx *fx)
{
	assert_int_equal(unlink(fx->index), 0);
	expect_error(fx, USH_ENOTCOMMITTED, 0, fx->index, -1,
		     "missing index");
	fx_restore(fx);
}

/* Rewrites the index with entry gi replaced by e (gi >= nidx: none),
 * without entry drop (>= nidx: none) and the header passed through
 * fix, every CRC valid. */
static void rewrite_index(struct fx *fx, size_t gi,
			  const struct spill_entry *e, size_t drop,
			  void (*fix)(struct spill_header *h))
{
	struct spill_entry *b = malloc(fx->nidx * sizeof(*b));
	assert_non_null(b);
	size_t n = 0;
	for (size_t i = 0; i < fx->nidx; i++)
		if (i != drop)
			b[n++] = i == gi ? *e : fx->idx[i];
	struct spill_header h = fx->hdr;
	th_index_store(fx->index, &h, b, n);
	free(b);
	if (!fix)
		return;
	uint8_t hb[USHI_INDEX_HEADER];
	fix(&h);
	spill_header_put(hb, &h);
	int fd = open(fx->index, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, hb, sizeof(hb), 0), (ssize_t)sizeof(hb));
	close(fd);
}

static void fix_map(struct spill_header *h)
{
	h->map ^= 1;
}

static void fix_entries(struct spill_header *h)
{
	h->entries++;
}

static void fix_shuffle(struct spill_header *h)
{
	h->shuffle++;
}

static void fix_partitions(struct spill_header *h)
{
	h->partitions++;
}

/* Writes the 8-byte start of directory slot p, then, when crc is set,
 * the CRC slot p must hold over the run it now names. */
static void poke_slot(struct fx *fx, uint32_t p, uint64_t start, bool crc)
{
	uint8_t *b = malloc(fx->ilen);
	assert_non_null(b);
	memcpy(b, fx->pindex, fx->ilen);
	uint8_t *slot = b + spill_slot_off(p);
	put_le64(slot, start);
	if (crc) {
		struct spill_slot s1;
		spill_slot_get(slot + USHI_INDEX_SLOT, &s1);
		assert_true(start <= s1.start);
		put_le32(slot + 8, spill_slot_crc(start, b +
			 spill_entry_off(NPARTS, start),
			 (s1.start - start) * USHI_INDEX_ENTRY));
	}
	th_write_file(fx->index, b, fx->ilen);
	free(b);
}

/* The header, its directory and the entries: each damage refused with
 * a message naming the index, the offset and the partition. */
static void index_header_damage(struct fx *fx)
{
	/* Bytes flipped under the header CRC, then the CRC itself. */
	flip(fx->index, 32, 0x01); /* data bytes */
	expect_error(fx, USH_ECRC, before(fx, 0), fx->index, 0,
		     "header data bytes");
	fx_restore(fx);
	flip(fx->index, 40, 0x01);
	expect_error(fx, USH_ECRC, before(fx, 0), fx->index, 0, "header crc");
	fx_restore(fx);
	flip(fx->index, 0, 0x01);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, 0,
		     "header magic");
	fx_restore(fx);
	flip(fx->index, 4, 0x01); /* version 3 */
	expect_error(fx, USH_EVERSION, before(fx, 0), fx->index, 0,
		     "unknown index version");
	fx_restore(fx);
	flip(fx->index, 44, 0x01); /* reserved */
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, 0,
		     "header reserved bytes");
	fx_restore(fx);
	/* A version 1 index (entries, then a "USHI" v1 trailer): refused
	 * as another version, not as garbage. */
	uint8_t v1[USHI_INDEX_ENTRY + USHI_INDEX_V1_TRAILER] = {0};
	put_le32(v1 + USHI_INDEX_ENTRY, USHI_INDEX_MAGIC);
	put_le16(v1 + USHI_INDEX_ENTRY + 4, 1);
	th_write_file(fx->index, v1, sizeof(v1));
	expect_error(fx, USH_EVERSION, before(fx, 0), fx->index, 0,
		     "version 1 index");
	fx_restore(fx);
	/* Truncated: inside the header, by an entry, to nothing. */
	const uint64_t cuts[] = {20, fx->ilen - 16, fx->ilen - 8, 0};
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		assert_int_equal(truncate(fx->index, (off_t)cuts[i]), 0);
		expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, 0,
			     "truncated index");
		fx_restore(fx);
	}
	/* Valid CRCs over a header naming another map output. */
	void (*fixes[])(struct spill_header *) = {fix_map, fix_shuffle,
		fix_entries, fix_partitions};
	for (size_t i = 0; i < sizeof(fixes) / sizeof(fixes[0]); i++) {
		rewrite_index(fx, SIZE_MAX, NULL, SIZE_MAX, fixes[i]);
		expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, 0,
			     "header field");
		fx_restore(fx);
	}
}

static void index_dir_damage(struct fx *fx)
{
	const long long slot = (long long)spill_slot_off(PART);
	struct spill_slot s0, s1;
	spill_slot_get(fx->pindex + spill_slot_off(PART), &s0);
	spill_slot_get(fx->pindex + spill_slot_off(PART + 1), &s1);
	/* A flipped start, a flipped CRC: the slot's CRC. */
	flip(fx->index, (uint64_t)slot, 0x01);
	expect_error(fx, USH_ECRC, before(fx, 0), fx->index, slot,
		     "slot start byte");
	fx_restore(fx);
	flip(fx->index, (uint64_t)slot + 8, 0x01);
	expect_error(fx, USH_ECRC, before(fx, 0), fx->index, slot,
		     "slot crc byte");
	fx_restore(fx);
	/* Out of range: past the entries, or past the next slot's. */
	poke_slot(fx, PART + 1, fx->nidx + 1, false);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, slot,
		     "slot past the entries");
	fx_restore(fx);
	poke_slot(fx, PART, s1.start + 1, false);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, slot,
		     "slot past the next one");
	fx_restore(fx);
	poke_slot(fx, PART, UINT64_MAX, false);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index, slot,
		     "slot at 2^64 - 1");
	fx_restore(fx);
	/* Valid CRCs over a wrong run. One entry short at the front: the
	 * first batch is missing, refused at the second. */
	poke_slot(fx, PART, s0.start + 1, true);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->data,
		     (long long)fx->ents[1].off, "slot one entry late");
	fx_restore(fx);
	/* One entry early: the run starts with another partition's. */
	poke_slot(fx, PART, s0.start - 1, true);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index,
		     (long long)spill_entry_off(NPARTS, s0.start - 1),
		     "slot one entry early");
	fx_restore(fx);
}

static void index_damage(struct fx *fx)
{
	const size_t k = 2, gi = fx->gidx[k];
	const long long slot = (long long)spill_slot_off(PART);

	/* A byte of one of the partition's entries: the slot's CRC. */
	flip(fx->index, spill_entry_off(NPARTS, gi) + 1, 0x10);
	expect_error(fx, USH_ECRC, before(fx, 0), fx->index, slot,
		     "index entry byte");
	fx_restore(fx);

	/* Valid CRCs over wrong contents. An entry pointing at another
	 * partition's frame, then one with a wrong length: caught when
	 * that frame is read, after the frames before it. */
	struct spill_entry e = fx->other;
	e.partition = PART;
	rewrite_index(fx, gi, &e, SIZE_MAX, NULL);
	expect_error(fx, USH_ECORRUPT, before(fx, k), fx->data,
		     (long long)e.off, "entry pointing at another frame");
	fx_restore(fx);
	e = fx->ents[k];
	e.len += 1;
	rewrite_index(fx, gi, &e, SIZE_MAX, NULL);
	expect_error(fx, USH_ECORRUPT, before(fx, k), fx->data,
		     (long long)e.off, "entry with a wrong length");
	fx_restore(fx);
	/* An entry past the data file's end: refused with the index. */
	e = fx->ents[k];
	e.off = fx->hdr.data_bytes;
	rewrite_index(fx, gi, &e, SIZE_MAX, NULL);
	expect_error(fx, USH_ECORRUPT, before(fx, 0), fx->index,
		     (long long)spill_entry_off(NPARTS, gi),
		     "entry past the end");
	fx_restore(fx);
	/* An entry dropped from a valid index: the partition must not
	 * just come back short; the batch after the gap is refused. */
	rewrite_index(fx, SIZE_MAX, NULL, gi, NULL);
	expect_error(fx, USH_ECORRUPT, before(fx, k), fx->data,
		     (long long)fx->ents[k + 1].off, "entry dropped");
	fx_restore(fx);
	/* The partition's last entry dropped leaves no gap: the map status
	 * says how many batches there are. */
	rewrite_index(fx, SIZE_MAX, NULL, fx->gidx[fx->nents - 1], NULL);
	expect_error(fx, USH_ECORRUPT, before(fx, fx->nents - 1), fx->data,
		     -1, "last entry dropped");
	fx_restore(fx);
	index_header_damage(fx);
	index_dir_damage(fx);
}

/* The index with copy c of PART's frame k listed just before (first
 * set) or just after it, and data_bytes h's with c's end. */
static void index_with_copy(struct fx *fx, size_t k,
			    const struct spill_entry *c, bool first)
{
	struct spill_entry *b = malloc((fx->nidx + 1) * sizeof(*b));
	assert_non_null(b);
	size_t n = 0;
	for (size_t i = 0; i < fx->nidx; i++) {
		if (i == fx->gidx[k] && first)
			b[n++] = *c;
		b[n++] = fx->idx[i];
		if (i == fx->gidx[k] && !first)
			b[n++] = *c;
	}
	struct spill_header h = fx->hdr;
	if (c->off + c->len > h.data_bytes)
		h.data_bytes = c->off + c->len;
	th_index_store(fx->index, &h, b, n);
	free(b);
}

/*
 * Two frames of one seq in PART's run of BAD_MAP (format.md §4). The
 * same frame listed twice is a resend: the records come back once. A
 * frame of the same shuffle, map, attempt, partition and seq with other
 * records (its CRC valid) is USH_ECORRUPT naming both offsets, whether
 * the index lists it before the genuine one or after: never resolved by
 * which comes first, never a successful read.
 */
static void duplicate_frames(struct fx *fx)
{
	const size_t k = 2;
	struct spill_entry g = fx->ents[k];
	index_with_copy(fx, k, &g, false);
	check_pristine(fx);
	fx_restore(fx);

	/* The other copy: the last record's last byte changed, appended
	 * to the data file (at a 4 KiB boundary, for O_DIRECT). */
	struct ushi_frame f;
	th_ok(frame_decode(fx->pdata + g.off, &f));
	struct spill_entry e = {ALIGN_UP(fx->dlen, 4096), g.len, PART};
	size_t n = (size_t)e.off + e.len;
	uint8_t *d = calloc(1, n);
	assert_non_null(d);
	memcpy(d, fx->pdata, fx->dlen);
	memcpy(d + e.off, fx->pdata + g.off, g.len);
	d[n - 1] ^= 0x5a;
	frame_encode(d + e.off, &f);
	for (int first = 0; first < 2; first++) {
		th_write_file(fx->data, d, n);
		index_with_copy(fx, k, &e, first);
		ush_reader *r;
		const void *rec;
		size_t len;
		uint64_t recs = 0;
		int ret;
		th_ok(th_reader_open(&r, fx->st, NMAPS, PART, 0));
		while ((ret = ush_reader_next(r, &rec, &len)) == 1)
			recs++;
		const char *msg = ush_last_error();
		print_message("%s\n", msg);
		if (ret != USH_ECORRUPT)
			fail_msg("copy %s the genuine frame: %d after %llu "
				 "records, expected USH_ECORRUPT: %s",
				 first ? "before" : "after", ret,
				 (unsigned long long)recs, msg);
		char want[PATH_MAX + 200];
		snprintf(want, sizeof(want), "shuffle %u map %u attempt 0 "
			 "partition %u seq %llu: two different frames",
			 SHUFFLE, BAD_MAP, PART, (unsigned long long)f.seq);
		if (!strstr(msg, want))
			fail_msg("\"%s\" lacks \"%s\"", msg, want);
		/* Both places, the one read first first. */
		snprintf(want, sizeof(want), " at %s offset %llu and CRC ",
			 fx->data, (unsigned long long)(first ? e.off : g.off));
		const char *at = strstr(msg, want);
		if (!at)
			fail_msg("\"%s\" lacks \"%s\"", msg, want);
		snprintf(want, sizeof(want), " at %s offset %llu",
			 fx->data, (unsigned long long)(first ? g.off : e.off));
		if (!strstr(at + 1, want))
			fail_msg("\"%s\" lacks \"%s\"", msg, want);
		ush_reader_free(r);
		fx_restore(fx);
	}
	free(d);
}

static void run_all(enum ush_codec codec, int direct)
{
	struct fx *fx = malloc(sizeof(*fx));
	assert_non_null(fx);
	fx_setup(fx, codec, direct);
	check_pristine(fx);
	header_flips(fx, codec);
	payload_flips(fx);
	truncations(fx);
	missing_index(fx);
	index_damage(fx);
	if (codec == USH_CODEC_NONE) /* the copy's records are changed */
		duplicate_frames(fx);
	/* Every damage was undone: the files read back whole again. */
	check_pristine(fx);
	fx_teardown(fx);
	free(fx);
}

static void corrupt_none_direct(void **state)
{
	(void)state;
	run_all(USH_CODEC_NONE, 1);
}

static void corrupt_none_buffered(void **state)
{
	(void)state;
	run_all(USH_CODEC_NONE, 0);
}

static void corrupt_lz4(void **state)
{
	(void)state;
	run_all(USH_CODEC_LZ4, 0);
}

static void corrupt_zstd(void **state)
{
	(void)state;
	run_all(USH_CODEC_ZSTD, 1);
}

/*
 * Large frames (written in place, read ahead with O_DIRECT): a payload
 * byte flipped in frame k of 6 gives USH_ECRC naming the data file and
 * the frame's offset, after exactly the records of the frames before it.
 */
static void large_frames_direct(void **state)
{
	(void)state;
	const char *dir = th_scratch("corrupt-large");
	enum { NF = 6, RPF = 2, RLEN = 30000 };
	struct ush_ring_opts ro;
	ush_ring_opts_init(&ro);
	ush_ring *ring;
	th_ok(ush_ring_create(&ring, &ro)); /* 64 KiB push buffers */
	struct ush_writer_opts wo = {.size = sizeof(wo), .shuffle = SHUFFLE,
		.partitions = 2, .target = USH_TARGET_DISK, .dir = dir,
		.direct = 1};
	ush_writer *w;
	th_ok(ush_writer_open(&w, ring, &wo));
	static uint8_t rec[RLEN];
	for (uint32_t i = 0; i < NF * RPF; i++)
		for (uint32_t p = 0; p < 2; p++) {
			th_fill(rec, RLEN, th_rec_seed(0, p, i));
			th_ok(ush_writer_write(w, p, rec, RLEN));
		}
	struct ush_status st;
	th_ok(th_commit(w, NULL, &st));
	ush_writer_free(w);
	ush_ring_free(ring);

	char data[PATH_MAX], index[PATH_MAX], needle[PATH_MAX + 64];
	spill_data(data, sizeof(data), dir, SHUFFLE, 0, 0);
	spill_index(index, sizeof(index), dir, SHUFFLE, 0, 0);
	struct spill_header h;
	struct spill_entry *e;
	size_t n;
	th_index_load(index, &h, &e, &n);
	assert_int_equal(n, 2 * NF);
	const struct spill_entry *pe = e + NF; /* partition 1's run */
	for (size_t k = 0; k < NF; k++) {
		assert_int_equal(pe[k].partition, PART);
		assert_false(spill_packed(pe[k].len));
		assert_int_equal(pe[k].off % 4096, 0); /* in place */
	}
	for (size_t k = 0; k <= NF; k++) { /* k = NF: pristine */
		if (k < NF)
			flip(data, pe[k].off + USH_FRAME_HDR_SIZE + 5000, 0x40);
		ush_reader *r;
		const void *p;
		size_t len;
		th_ok(th_reader_open(&r, &st, 1, PART, 0));
		uint32_t got = 0;
		int ret;
		while ((ret = ush_reader_next(r, &p, &len)) == 1) {
			th_fill(rec, RLEN, th_rec_seed(0, PART, got));
			assert_int_equal(len, RLEN);
			assert_memory_equal(p, rec, RLEN);
			got++;
		}
		if (k == NF) {
			assert_int_equal(ret, 0);
			assert_int_equal(got, NF * RPF);
		} else {
			assert_int_equal(ret, USH_ECRC);
			assert_int_equal(got, k * RPF);
			snprintf(needle, sizeof(needle), "%s offset %llu "
				 "partition %u", data,
				 (unsigned long long)pe[k].off, PART);
			if (!strstr(ush_last_error(), needle))
				fail_msg("\"%s\" lacks \"%s\"", ush_last_error(),
					 needle);
			flip(data, pe[k].off + USH_FRAME_HDR_SIZE + 5000, 0x40);
		}
		ush_reader_free(r);
	}
	free(e);
	th_status_free(&st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(corrupt_none_direct, th_teardown),
		cmocka_unit_test_teardown(corrupt_none_buffered, th_teardown),
		cmocka_unit_test_teardown(corrupt_lz4, th_teardown),
		cmocka_unit_test_teardown(corrupt_zstd, th_teardown),
		cmocka_unit_test_teardown(large_frames_direct, th_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
