/*
 * ushuffle --rw=read --verify=crc32c over spill files damaged after a
 * --rw=write: a flipped byte (the library's frame CRC names the file), a
 * record altered behind a recomputed frame CRC (the record check sees
 * the record; the map status's checksum over the frame CRCs, the
 * resealed frame), records missing or extra against what the writer
 * committed, and a truncated file. Each exits 1 and describes the first
 * mismatches.
 */
#include "cli_run.h"
#include "core/frame.h"

#include <fcntl.h>
#include <glob.h>

static const char *spill_dir;

static void write_job(const char *name, const char *codec)
{
	char n[64], c[64], d[600];
	snprintf(n, sizeof(n), "--name=%s", name);
	snprintf(c, sizeof(c), "--codec=%s", codec);
	snprintf(d, sizeof(d), "--dir=%s", spill_dir);
	struct cli_out r = cli_run(NULL, n, c, d, "--rw=write", "--size=256k",
				   "--numjobs=2", "--partitions=4",
				   "--eta=never");
	cli_expect(&r, 0);
	cli_free(&r);
}

static struct cli_out read_job(const char *name, const char *format)
{
	char n[64], d[600], f[64];
	snprintf(n, sizeof(n), "--name=%s", name);
	snprintf(d, sizeof(d), "--dir=%s", spill_dir);
	snprintf(f, sizeof(f), "--output-format=%s", format);
	return cli_run(NULL, n, d, f, "--rw=read", "--verify=crc32c",
		       "--numjobs=2", "--eta=never");
}

/* The one file of job name matching pattern, e.g. "m1.a*.data". */
static void job_file(const char *name, const char *pattern, char *out,
		     size_t n)
{
	char pat[700];
	glob_t g;
	snprintf(pat, sizeof(pat), "%s/s%u/%s", spill_dir, cli_shuffle_id(name),
		 pattern);
	assert_int_equal(glob(pat, 0, NULL, &g), 0);
	assert_int_equal(g.gl_pathc, 1);
	snprintf(out, n, "%s", g.gl_pathv[0]);
	globfree(&g);
}

static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b;
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, off), 1);
	b ^= 0x5a;
	assert_int_equal(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

static void corrupted_spill_file_fails_the_read(void **state)
{
	(void)state;
	static const char *const codecs[] = {"none", "lz4", "zstd"};
	for (size_t c = 0; c < 3; c++) {
		char name[32], data[700];
		snprintf(name, sizeof(name), "flip-%s", codecs[c]);
		write_job(name, codecs[c]);
		job_file(name, "m1.a*.data", data, sizeof(data));
		flip_byte(data, 100); /* inside the first frame's payload */
		struct cli_out r = read_job(name, "normal");
		cli_expect(&r, 1);
		cli_has(r.err, data);
		cli_has(r.err, "CRC32C mismatch");
		cli_has(r.err, "verify failed");
		cli_has(r.out, "errors (failed)");
		/* A read job reports the shape it reads, not its defaults. */
		cli_has(r.out, "rw=read, maps=2, partitions=4, record-size="
			"100-1000, target=disk (from the write job's manifest)");
		/* The first line names the failure (after the library's
		 * warnings: without io_uring, one says so). */
		const char *line = r.err;
		while (!strncmp(line, "ushuffle: warning: ", 19))
			line = strchr(line, '\n') + 1;
		assert_true(!strncmp(line, "ushuffle: job 'flip-", 20));
		cli_free(&r);
		r = read_job(name, "json");
		cli_expect(&r, 1);
		json_object *j = cli_json(&r);
		json_object *o = json_object_array_get_idx(jget(j, "jobs"), 0);
		assert_string_equal(jstr(o, "verify/status"), "failed");
		assert_int_equal(jint(o, "shape/maps"), 2);
		assert_int_equal(jint(o, "shape/partitions"), 4);
		json_object *errs = jget(o, "verify/first_errors");
		const char *first = json_object_get_string(
			json_object_array_get_idx(errs, 0));
		assert_non_null(strstr(first, data));
		/* Every error comes with its message. */
		for (size_t i = 0; i < 2; i++) {
			o = json_object_array_get_idx(jget(j, "jobs"), i);
			if (json_object_get_int(jget(o, "error")))
				cli_has(jstr(o, "error_message"), "mismatch");
		}
		json_object_put(j);
		cli_free(&r);
	}
}

/* Alters a record inside map 0's first frame and re-seals the frame, so
 * the frame's own CRC passes: the record check names the record, and the
 * reader, at the map's end, the checksum its map status holds over the
 * frame CRCs (since 0.3). */
static void record_altered_behind_a_valid_frame(void **state)
{
	(void)state;
	char data[700];
	write_job("reseal", "none");
	job_file("reseal", "m0.a*.data", data, sizeof(data));
	int fd = open(data, O_RDWR);
	assert_true(fd >= 0);
	uint8_t hdr[USH_FRAME_HDR_SIZE];
	struct ushi_frame f;
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), sizeof(hdr));
	assert_int_equal(frame_decode(hdr, &f), 0);
	size_t len = ush_frame_size(f.payload_len);
	uint8_t *buf = malloc(len);
	assert_int_equal(pread(fd, buf, len, 0), (ssize_t)len);
	/* record 0: 4-byte length, 16-byte verify header, then its body */
	buf[USH_FRAME_HDR_SIZE + USH_RECORD_HDR_SIZE + 16 + 5] ^= 0x01;
	frame_encode(buf, &f);
	assert_int_equal(pwrite(fd, buf, len, 0), (ssize_t)len);
	free(buf);
	close(fd);
	struct cli_out r = read_job("reseal", "normal");
	cli_expect(&r, 1);
	char want[64];
	snprintf(want, sizeof(want), "partition %u map 0 seq ", f.partition);
	cli_has(r.err, want);
	cli_has(r.err, "crc32c mismatch: stored 0x");
	snprintf(want, sizeof(want), "partition %u map 0 attempt 0: ",
		 f.partition);
	cli_has(r.err, data);
	cli_has(r.err, want);
	cli_has(r.err, "its map status says");
	cli_has(r.err, "verify failed: 2 errors");
	cli_free(&r);
}

static void missing_and_extra_records(void **state)
{
	(void)state;
	char manifest[700];
	write_job("counts", "lz4");
	job_file("counts", "ushuffle-job.json", manifest, sizeof(manifest));
	json_object *m = json_object_from_file(manifest);
	assert_non_null(m);
	json_object *rec = jget(m, "records");
	json_object *row0 = json_object_array_get_idx(rec, 0);
	json_object *row1 = json_object_array_get_idx(rec, 1);
	uint64_t a = json_object_get_uint64(json_object_array_get_idx(row0, 1));
	uint64_t b = json_object_get_uint64(json_object_array_get_idx(row1, 2));
	assert_true(b > 0);
	json_object_array_put_idx(row0, 1, json_object_new_uint64(a + 3));
	json_object_array_put_idx(row1, 2, json_object_new_uint64(b - 1));
	assert_int_equal(json_object_to_file(manifest, m), 0);
	json_object_put(m);
	struct cli_out r = read_job("counts", "normal");
	cli_expect(&r, 1);
	char want[160];
	snprintf(want, sizeof(want), "partition 1 map 0: %llu records, "
		 "expected %llu (3 missing)", (unsigned long long)a,
		 (unsigned long long)a + 3);
	cli_has(r.err, want);
	snprintf(want, sizeof(want), "partition 2 map 1: %llu records, "
		 "expected %llu (1 extra)", (unsigned long long)b,
		 (unsigned long long)b - 1);
	cli_has(r.err, want);
	cli_has(r.err, "verify failed: 4 errors");
	cli_free(&r);
}

static void truncated_spill_file(void **state)
{
	(void)state;
	char data[700];
	write_job("trunc", "zstd");
	job_file("trunc", "m1.a*.data", data, sizeof(data));
	assert_int_equal(truncate(data, 4096), 0);
	struct cli_out r = read_job("trunc", "normal");
	cli_expect(&r, 1);
	cli_has(r.err, data);
	cli_has(r.err, "truncated");
	cli_free(&r);
}

static int setup(void **state)
{
	(void)state;
	spill_dir = th_tmpdir("cliverify");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	th_rmrf(spill_dir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(corrupted_spill_file_fails_the_read),
		cmocka_unit_test(record_altered_behind_a_valid_frame),
		cmocka_unit_test(missing_and_extra_records),
		cmocka_unit_test(truncated_spill_file),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
