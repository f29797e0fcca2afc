/*
 * The options structs' layouts keep every older caller's bytes meaning
 * what they meant ("Extensible structs" in ushuffle.h). A library reads
 * a caller's struct up to its size field, so a field placed in an older
 * layout's tail padding would take whatever junk such a caller left
 * there (a struct copied by assignment, or built without its _init()).
 * Two checks:
 *  - no options struct ends in padding today, so the next field appended
 *    cannot land in it (when this fails, add the field and, if it leaves
 *    the struct unaligned, a reserved field after it; then name the new
 *    last field below);
 *  - the tail padding of every released layout (tests/abi/ushuffle_old.h)
 *    holds a reserved field or lies between fields, never a field.
 *
 * Plain C and exit codes, like old_caller.c.
 */
#include "ushuffle/ushuffle.h"
#include "ushuffle/worker.h"

#include <stdio.h>
#include <string.h>

static int failed;

#define END(type, field)                                                     \
	(offsetof(struct type, field) + sizeof(((struct type *)0)->field))

/* type ends exactly where its last field does. */
#define NO_TAIL_PADDING(type, last)                                          \
	do {                                                                 \
		if (END(type, last) != sizeof(struct type)) {                \
			fprintf(stderr, "%s: %zu bytes of padding after "    \
				"%s (%zu..%zu): a field appended there "     \
				"would read older callers' junk\n", #type,   \
				sizeof(struct type) - END(type, last), #last, \
				END(type, last), sizeof(struct type));       \
			failed = 1;                                          \
		}                                                            \
	} while (0)

/* An older layout's tail padding, from..to, stays out of use today:
 * a reserved field covers it, or the next field starts after it. */
#define PADDING_KEPT(type, next, from, to)                                   \
	do {                                                                 \
		size_t at = offsetof(struct type, next);                     \
		int reserved = !strncmp(#next, "reserved", 8);               \
		if (reserved ? at > (from) || END(type, next) < (to)         \
			     : at < (to)) {                                  \
			fprintf(stderr, "%s: %s at %zu: the tail padding "   \
				"of an older layout (%d..%d) must stay "     \
				"unread\n", #type, #next, at, (from), (to)); \
			failed = 1;                                          \
		}                                                            \
	} while (0)

int main(void)
{
	NO_TAIL_PADDING(ush_ring_opts, level);
	NO_TAIL_PADDING(ush_writer_opts, seal_key);
	NO_TAIL_PADDING(ush_reader_opts, reserved0);
	NO_TAIL_PADDING(ush_worker_opts, max_app_fetch_bytes);
#if defined(__x86_64__) || defined(__aarch64__)
	/* LP64: 0.4's writer options (80 bytes) end at replicas (76); 0.3's
	 * worker options (88) end at max_open_files (84). */
	PADDING_KEPT(ush_writer_opts, reserved0, 76, 80);
	PADDING_KEPT(ush_worker_opts, secret_file, 84, 88);
#endif
	printf("%s\n", failed ? "layout: FAILED" : "layout: ok");
	return failed;
}
