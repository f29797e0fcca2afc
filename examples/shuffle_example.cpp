/*
 * The C++ side of the public API: a map task writes records into a spill
 * directory, a reduce task reads one partition back. The handles live in
 * std::unique_ptr with the library's free functions as deleters, and a
 * failing call throws with ush_last_error()'s message.
 *
 *   ush_example_cxx [DIR]      (default: ./ushuffle-example-cxx)
 */
#include <ushuffle/ushuffle.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

template <typename T, void (*Free)(T *)> struct deleter {
	void operator()(T *p) const { Free(p); }
};
using ring_ptr = std::unique_ptr<ush_ring, deleter<ush_ring, ush_ring_free>>;
using writer_ptr =
	std::unique_ptr<ush_writer, deleter<ush_writer, ush_writer_free>>;
using reader_ptr =
	std::unique_ptr<ush_reader, deleter<ush_reader, ush_reader_free>>;

void check(int ret, const char *what)
{
	if (ret < 0)
		throw std::runtime_error(std::string(what) + ": " +
					 ush_last_error());
}

const unsigned parts = 4;

// Writes records to every partition; returns the map status, copied (it
// is the writer's until the writer is freed).
std::string write_map(const std::string &dir,
		      const std::vector<std::string> &records)
{
	ush_ring *r;
	check(ush_ring_create(&r, nullptr), "ring");
	ring_ptr ring(r);
	ush_writer_opts o;
	ush_writer_opts_init(&o);
	o.shuffle = 1;
	o.partitions = parts;
	o.target = USH_TARGET_DISK;
	o.dir = dir.c_str();
	o.ioengine = USH_IOENGINE_URING;
	ush_writer *w;
	int ret;
	while ((ret = ush_writer_open(&w, ring.get(), &o)) == USH_ECOMMITTED)
		o.attempt++; // run again in the same directory: the next attempt
	check(ret, "writer open");
	writer_ptr writer(w);
	for (size_t i = 0; i < records.size(); i++)
		check(ush_writer_write(writer.get(), uint32_t(i % parts),
				       records[i].data(), records[i].size()),
		      "write");
	ush_status st;
	check(ush_writer_commit(writer.get(), nullptr), "commit");
	check(ush_writer_status(writer.get(), &st), "status");
	return std::string(static_cast<const char *>(st.data), st.len);
}

std::vector<std::string> read_partition(const std::string &status,
					uint32_t partition)
{
	ush_status st{status.data(), status.size()};
	ush_reader_opts o;
	ush_reader_opts_init(&o);
	o.partition = partition;
	o.statuses = &st;
	o.nstatuses = 1;
	ush_reader *r;
	check(ush_reader_open(&r, &o), "reader open");
	reader_ptr reader(r);
	std::vector<std::string> out;
	const void *rec;
	size_t len;
	int ret;
	while ((ret = ush_reader_next(reader.get(), &rec, &len)) == 1)
		out.emplace_back(static_cast<const char *>(rec), len);
	check(ret, "read");
	return out;
}

} // namespace

int main(int argc, char **argv)
{
	std::string dir = argc > 1 ? argv[1] : "./ushuffle-example-cxx";
	std::vector<std::string> records;
	for (unsigned i = 0; i < 1000; i++)
		records.push_back("record " + std::to_string(i));
	try {
		std::string status = write_map(dir, records);
		size_t total = 0;
		for (uint32_t p = 0; p < parts; p++) {
			std::vector<std::string> got = read_partition(status, p);
			for (size_t i = 0; i < got.size(); i++)
				if (got[i] != records[p + i * parts])
					throw std::runtime_error("record out of place");
			total += got.size();
		}
		std::printf("ush_example_cxx: %zu of %zu records read back: %s\n",
			    total, records.size(),
			    total == records.size() ? "OK" : "MISSING");
		return total == records.size() ? 0 : 1;
	} catch (const std::exception &e) {
		std::fprintf(stderr, "ush_example_cxx: %s\n", e.what());
		return 1;
	}
}
