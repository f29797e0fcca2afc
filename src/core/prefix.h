/*
 * The core functions libushuffle lends to libushuffle_worker. The worker
 * links the client library rather than carrying a copy of the core, so
 * one process has one error message per thread, one log sink, one set of
 * counters. These functions therefore sit in libushuffle.so's dynamic
 * symbol table (node USHUFFLE_PRIVATE of src/libushuffle.map, named
 * USHUFFLE_PRIVATE_<version> in the built library), where a
 * module-prefixed name (ring_start) could bind to a host program's own
 * function of that name: here they get the internal prefix at link time,
 * as zlib's Z_PREFIX does, and keep their short names in the source.
 *
 * A core function the worker starts to call goes here and in the map's
 * USHUFFLE_PRIVATE node (else the worker does not link: -z defs), and
 * tests/exports.sh checks that node against what the worker imports.
 */
#ifndef USHI_PREFIX_H
#define USHI_PREFIX_H

#define auth_mac ushi_auth_mac
#define auth_mac_equal ushi_auth_mac_equal
#define auth_nonce ushi_auth_nonce
#define auth_read_secret ushi_auth_read_secret
#define auth_secret_len_ok ushi_auth_secret_len_ok
#define frame_check ushi_frame_check
#define frame_decode ushi_frame_decode
#define mac_derive ushi_mac_derive
#define mac_free ushi_mac_free
#define mac_open ushi_mac_open
#define mac_seal ushi_mac_seal
#define mac_start ushi_mac_start
#define pool_get ushi_pool_get
#define pool_order ushi_pool_order
#define pool_put ushi_pool_put
#define proto_app_ok ushi_proto_app_ok
#define proto_get_auth ushi_proto_get_auth
#define proto_get_hello ushi_proto_get_hello
#define proto_get_want ushi_proto_get_want
#define proto_header ushi_proto_header
#define proto_put_ack ushi_proto_put_ack
#define proto_put_auth ushi_proto_put_auth
#define proto_put_error ushi_proto_put_error
#define proto_put_fetch_end ushi_proto_put_fetch_end
#define proto_put_hello ushi_proto_put_hello
#define proto_put_manifest ushi_proto_put_manifest
#define proto_wants ushi_proto_wants
#define ring_arm ushi_ring_arm
#define ring_drain ushi_ring_drain
#define ring_file_add ushi_ring_file_add
#define ring_file_del ushi_ring_file_del
#define ring_op_get ushi_ring_op_get
#define ring_pool ushi_ring_pool
#define ring_reap ushi_ring_reap
#define ring_reap_timeout ushi_ring_reap_timeout
#define ring_register_buf_ring ushi_ring_register_buf_ring
#define ring_send_end ushi_ring_send_end
#define ring_send_own ushi_ring_send_own
#define ring_start ushi_ring_start
#define ring_write_at ushi_ring_write_at
#define ring_fsync ushi_ring_fsync

#endif
