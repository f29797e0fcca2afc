/*
 * Multi-host: two ushuffled processes, each in a network namespace of
 * its own joined to this one by a veth pair with addresses from the
 * benchmarking range 198.18.0.0/15. The test creates and removes the
 * namespaces itself and sends nowhere else. Skips (exit 77) where
 * namespaces cannot be created (no CAP_NET_ADMIN, no ip(8)).
 */
#include "net_helpers.h"

/* addr2[i]: host i's second address (its second worker in the replicas
 * test listens there, so that only the labels tell it is on host i). */
static char ns[2][32], veth[2][16], addr[2][32], addr2[2][32];
/* wk[i] in ns[i]; wk[2 + i] a second worker on host i (replicas). */
static struct th_worker wk[4];

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static void cleanup(void)
{
	for (int i = 0; i < 4; i++)
		if (wk[i].pid)
			th_worker_kill(&wk[i]);
	for (int i = 0; i < 2; i++) {
		/* Deleting the namespace deletes its end of the veth pair,
		 * and with it ours. */
		if (ns[i][0])
			sh("ip netns del %s 2>/dev/null", ns[i]);
		sh("ip link del %s 2>/dev/null", veth[i]);
	}
}

/* Returns 0, or -1 when this host cannot make namespaces. */
static int make_hosts(void)
{
	unsigned k = (unsigned)getpid() % 250;
	for (int i = 0; i < 2; i++) {
		snprintf(ns[i], sizeof(ns[i]), "ush-t%d-%d", (int)getpid(), i);
		snprintf(veth[i], sizeof(veth[i]), "ush%d%c",
			 (int)getpid() % 100000, 'a' + i);
		if (sh("ip netns add %s 2>/dev/null", ns[i])) {
			ns[i][0] = 0;
			return -1;
		}
		snprintf(addr[i], sizeof(addr[i]), "198.18.%u.%d", k,
			 4 * i + 2);
		snprintf(addr2[i], sizeof(addr2[i]), "198.18.%u.%d", k,
			 100 + i);
		if (sh("ip link add %s type veth peer name p0 netns %s",
		       veth[i], ns[i]) ||
		    sh("ip addr add 198.18.%u.%d/30 dev %s", k, 4 * i + 1,
		       veth[i]) ||
		    sh("ip link set %s up", veth[i]) ||
		    sh("ip -n %s addr add %s/30 dev p0", ns[i], addr[i]) ||
		    sh("ip -n %s link set p0 up", ns[i]) ||
		    sh("ip -n %s link set lo up", ns[i]) ||
		    sh("ip -n %s addr add %s/32 dev p0", ns[i], addr2[i]) ||
		    sh("ip route add %s/32 dev %s", addr2[i], veth[i]))
			return -1;
	}
	return 0;
}

/* Runs w in host h's namespace (a copy of the name: same sizes, NUL
 * included, which snprintf's truncation check cannot see through). */
static void in_host(struct th_worker *w, int h)
{
	_Static_assert(sizeof(w->ns) == sizeof(ns[h]), "namespace names");
	memcpy(w->ns, ns[h], sizeof(w->ns));
}

static void two_hosts(void **state)
{
	(void)state;
	char list[128];
	for (int i = 0; i < 2; i++) {
		snprintf(wk[i].dir, sizeof(wk[i].dir), "%s",
			 th_tmpdir("netns"));
		in_host(&wk[i], i);
		th_worker_spawn(&wk[i], addr[i], 7337, 2);
	}
	snprintf(list, sizeof(list), "%s,%s", wk[0].addr, wk[1].addr);
	struct ush_status statuses[2] = {{0}};
	struct th_job j = {.workers = list, .shuffle = 6, .partitions = 9,
			   .maps = 2, .records = 30000, .statuses = statuses};
	for (uint32_t m = 0; m < j.maps; m++) {
		struct ush_writer_stats st;
		th_ok(th_push_map(&j, m, 0, &st));
		assert_int_equal(st.net_workers, 2);
	}
	th_verify(&j);
	th_job_free(&j);
	for (int i = 0; i < 2; i++) {
		th_worker_stop(&wk[i]);
		th_rmrf(wk[i].dir);
	}
}

/* Where a replicas round loses host A: at a record of the push, at the
 * commit (after the last record, before MAPPER_END), after the commit,
 * or at a record of the fetch. */
enum host_loss { AT_PUSH, AT_COMMIT, BEFORE_FETCH, AT_FETCH };
static struct {
	enum host_loss when;
	uint64_t at; /* record (push: of all maps; fetch: read so far) */
} loss;

static void lose_host_a(void)
{
	th_worker_kill(&wk[0]);
	th_worker_kill(&wk[1]);
}

static void loss_pushed(const struct th_job *j, uint32_t m, uint32_t i)
{
	uint64_t n = (uint64_t)m * j->records + i + 1;
	if ((loss.when == AT_PUSH && n == loss.at) ||
	    (loss.when == AT_COMMIT && n == (uint64_t)j->maps * j->records))
		lose_host_a();
}

static void loss_checked(const struct th_job *j, uint64_t n)
{
	(void)j;
	if (loss.when == AT_FETCH && n == loss.at)
		lose_host_a();
}

/* Replicas across hosts: two workers per host, each on an address of its
 * own, listed host A, host A, host B, host B with their labels. By
 * address alone (the default label) a partition's two replicas would
 * share host A for some partitions; the labels put one on each, so
 * losing host A (both its workers SIGKILLed) during the push, the commit
 * or the fetch loses nothing and reruns no map. */
static void replicas_across_hosts(void **state)
{
	(void)state;
	static const char *const name[] = {"during the push", "at the commit",
					   "before the fetch",
					   "during the fetch"};
	uint64_t x = 42; /* xorshift: the kill points, printed */
	for (int r = 0; r < 12; r++) { /* each point three times */
		char list[256];
		int len = 0;
		for (int i = 0; i < 4; i++) {
			snprintf(wk[i].dir, sizeof(wk[i].dir), "%s",
				 th_tmpdir("netns"));
			in_host(&wk[i], i / 2);
			th_worker_spawn(&wk[i], i % 2 ? addr2[i / 2] :
							 addr[i / 2], 7340, 1);
			len += snprintf(list + len, sizeof(list) - (size_t)len,
					"%s%s@host%c", i ? "," : "",
					wk[i].addr, 'A' + i / 2);
		}
		struct ush_status statuses[2] = {{0}};
		struct th_job j = {.workers = list, .shuffle = 10 + (uint32_t)r,
				   .partitions = 12, .maps = 2, .records = 20000,
				   .replicas = 2, .statuses = statuses,
				   .timeout_ms = 10000, .pushed = loss_pushed,
				   .checked = loss_checked};
		loss.when = (enum host_loss)(r % 4);
		loss.at = 1 + th_rand(&x) % ((uint64_t)j.maps * j.records);
		printf("round %d: host A lost %s (record %llu of the push "
		       "or the fetch)\n", r, name[loss.when],
		       (unsigned long long)loss.at);
		for (uint32_t m = 0; m < j.maps; m++)
			th_ok(th_push_map(&j, m, 0, NULL));
		if (loss.when == BEFORE_FETCH)
			lose_host_a();
		th_verify(&j);
		assert_false(th_worker_alive(&wk[0]));
		assert_false(th_worker_alive(&wk[1]));
		th_job_free(&j);
		for (int i = 0; i < 4; i++) {
			th_worker_stop(&wk[i]);
			th_rmrf(wk[i].dir);
		}
	}
}

static int teardown(void **state)
{
	(void)state;
	cleanup();
	return 0;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (make_hosts()) {
		cleanup();
		printf("skipped: cannot create network namespaces and veth "
		       "pairs here (needs ip(8) and CAP_NET_ADMIN)\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(two_hosts),
		cmocka_unit_test(replicas_across_hosts),
	};
	return cmocka_run_group_tests(tests, NULL, teardown);
}
