/*
 * The public headers as a C++ caller sees them (built as C++11 and C++17
 * with -Wall -Wextra -Werror): every name usable, the inline wrappers
 * compile, and the running library is the one the header describes.
 */
#define USH_UNSTABLE_API 1
#include <ushuffle/ushuffle.h>
#include <ushuffle/worker.h>

#include <cstdio>
#include <cstring>

int main()
{
	struct ush_writer_opts wo;
	ush_writer_opts_init(&wo);
	wo.target = USH_TARGET_DISK;
	wo.ioengine = USH_IOENGINE_PSYNC;
	struct ush_reader_opts ro;
	ush_reader_opts_init(&ro);
	struct ush_ring_opts rgo;
	ush_ring_opts_init(&rgo);
	enum ush_codec codec = USH_CODEC_NONE;
	int level = 0;
	struct ush_worker_opts ko;
	ush_worker_opts_init(&ko);
	struct ush_lib_stats st;
	ush_lib_stats(&st);
	struct ush_lat lat;
	ush_lat_init(&lat);
	if (ush_codec_parse("zstd", &codec, &level) || codec != USH_CODEC_ZSTD ||
	    ush_version() != USH_VERSION_NUMBER ||
	    std::strcmp(ush_version_string(), USH_VERSION_STRING) ||
	    ush_err_name(USH_ECRC)[0] != 'U' || ko.size != sizeof(ko) ||
	    wo.ioengine != USH_IOENGINE_PSYNC) {
		std::fprintf(stderr, "C++ caller: unexpected values\n");
		return 1;
	}
	std::printf("C++%ld caller of ushuffle %s ok\n", __cplusplus / 100 % 100,
		    ush_version_string());
	return 0;
}
