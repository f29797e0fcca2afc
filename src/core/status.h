/*
 * The map status (docs/format.md §5): what a commit yields and a reader is
 * opened with. A 36-byte header, the application id, the location (disk
 * directory or worker list), a table of 64-partition blocks, then per
 * partition a LEB128 batch count and, when it is not zero, the checksum
 * of its batches. The header CRC covers header, application, location
 * and block table; each block has its own CRC, so a reader checks only
 * the block of its partition.
 */
#ifndef USHI_STATUS_H
#define USHI_STATUS_H

#include "core/internal.h"

#define USHI_STATUS_MAGIC 0x534d5355u /* "USMS" */
/* Version 2 (replicas): each non-empty partition's entry ends with a
 * LEB128 mask of the location's workers holding a complete copy. A
 * status without replicas stays version 1, readable by older readers.
 * Version 3 (sealed frames): a flags byte says which of masks and seal
 * it has; a sealed map's key id and salt follow the location. Only a
 * sealed map's status is version 3. */
#define USHI_STATUS_VERSION 3
#define USHI_STATUS_MASKS 0x01u  /* version 3 flags */
#define USHI_STATUS_SEALED 0x02u
#define USHI_STATUS_SEAL 20u     /* key id, salt */
#define USHI_STATUS_HDR 36u
#define USHI_STATUS_BLOCK 64u     /* partitions per block */
#define USHI_STATUS_LOC_MAX 4096u /* location bytes */
#define USHI_STATUS_APP_MAX 64u   /* application id bytes */

/* A parsed status: pointers into the caller's bytes. */
struct status {
	uint8_t version; /* 1..3; status_build(): 3 iff sealed, else 2 iff
			    holders */
	bool masks;      /* entries end with holder masks */
	bool sealed;     /* its frames are sealed under seal_id, salt */
	uint32_t seal_id;
	const uint8_t *salt; /* 16 bytes; NULL when plain */
	uint8_t target; /* enum ush_target */
	uint32_t shuffle, map, attempt, partitions;
	const char *app, *loc; /* not NUL-terminated */
	uint32_t app_len, loc_len;
	const uint8_t *blocks, *body;
	uint32_t body_len;
	/* status_build(): per partition, the mask of workers holding it
	 * (bit i: worker i of loc), or NULL for version 1 */
	const uint64_t *holders;
};

/* A partition's batches and the checksum over their frame CRCs: fold
 * each CRC in with status_sum_add() in sequence order, starting from
 * USHI_SUM_INIT; the stored value is the final ~sum. */
#define USHI_SUM_INIT 0xffffffffu
uint32_t status_sum_add(uint32_t sum, uint32_t frame_crc);

/* Writes the status of a map into a new heap buffer (*out, *len; free it
 * with ushi_free()). part(arg, p, &batches, &sum) gives partition p's
 * batch count and final checksum. Returns 0 or -ENOMEM. */
int status_build(uint8_t **out, size_t *len, const struct status *s,
		 void (*part)(const void *arg, uint32_t p, uint64_t *batches,
			      uint32_t *sum),
		 const void *arg);
/* Parses and checks the header, location and block table. Returns 0,
 * USH_ECORRUPT or USH_EVERSION with *why naming the broken rule. */
int status_parse(const uint8_t *p, size_t n, struct status *s,
		 const char **why);
/* Partition p's entry, its block's CRC checked: 0 or USH_ECORRUPT.
 * holders (may be NULL) gets the version 2 mask, 0 in version 1. */
int status_part(const struct status *s, uint32_t p, uint64_t *batches,
		uint32_t *sum, uint64_t *holders, const char **why);
/* Total batches of every partition (walks every block). */
int status_batches(const struct status *s, uint64_t *batches,
		   const char **why);

#endif
