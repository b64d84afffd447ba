/* whale-train's observability pieces against hand calculations and a real
 * socket: runtime/tools/train/train_{cost,prom,sysmon}.c. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "train_observe.h"
#include "train_prom.h"

static void test_cost(void **st)
{
    (void)st;
    struct train_cost c;
    /* $3.60 per hour for 100 s = $0.10; 1e5 tokens -> $1 per million; loss 5 -> 4 = ten 0.1s */
    train_cost_compute(3.6, 100, 1e5, 5.0, 4.0, &c);
    assert_true(fabs(c.usd - 0.1) < 1e-12);
    assert_true(fabs(c.usd_per_mtok - 1.0) < 1e-12);
    assert_true(fabs(c.usd_per_01_loss - 0.01) < 1e-12);
    train_cost_compute(-1, 100, 1e5, 5, 4, &c); /* no price */
    assert_true(c.usd < 0 && c.usd_per_mtok < 0 && c.usd_per_01_loss < 0);
    train_cost_compute(3.6, 100, 0, 4, 5, &c);  /* no tokens, loss went up */
    assert_true(c.usd > 0 && c.usd_per_mtok < 0 && c.usd_per_01_loss < 0);
    train_cost_compute(3.6, 100, 1e5, NAN, 4, &c);
    assert_true(c.usd_per_01_loss < 0);
}

static void test_prom_text(void **st)
{
    (void)st;
    char lab[512];
    train_prom_labels(lab, sizeof lab, "42", "0", 3, "no\"de\\1\nx");
    assert_string_equal(lab, "{slurm_job_id=\"42\",slurm_step_id=\"0\",rank=\"3\","
                             "node=\"no\\\"de\\\\1\\nx\"}");
    struct train_prom_text t = { 0 };
    train_prom_metric(&t, "whale_loss", "gauge", "Loss.", "{rank=\"0\"}", 2.5);
    train_prom_metric(&t, "whale_nan", "gauge", "Left out.", "{rank=\"0\"}", NAN);
    for (int i = 0; i < 200; i++) /* grows past the first buffer */
        train_prom_metric(&t, "whale_x", "gauge", "Filler.", "", i);
    assert_false(t.oom);
    assert_non_null(strstr(t.buf, "# HELP whale_loss Loss.\n# TYPE whale_loss gauge\n"
                                  "whale_loss{rank=\"0\"} 2.5\n"));
    assert_null(strstr(t.buf, "whale_nan"));
    assert_int_equal(strlen(t.buf), t.len);
    free(t.buf);
}

static void test_prom_file(void **st)
{
    (void)st;
    char dir[] = "/tmp/whale-prom-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/whale.prom", dir);
    mode_t old = umask(077);
    assert_int_equal(train_prom_write_file(path, "a 1\n", 4), 0);
    assert_int_equal(train_prom_write_file(path, "b 2\n", 4), 0); /* replaces */
    umask(old);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0644); /* the collector runs as another user */
    FILE *f = fopen(path, "r");
    char buf[16] = "";
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "b 2\n");
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(n, 1); /* no temporary file left */
    snprintf(path, sizeof path, "%s/missing/x.prom", dir);
    assert_true(train_prom_write_file(path, "c 3\n", 4) < 0);
    snprintf(path, sizeof path, "%s/whale.prom", dir);
    unlink(path);
    rmdir(dir);
}

static void http_get(int port, const char *req, char *out, size_t n)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    size_t got = 0;
    ssize_t r;
    while (got < n - 1 && (r = read(fd, out + got, n - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(fd);
}

static void test_prom_server(void **st)
{
    (void)st;
    struct train_prom_server *s = NULL;
    int port = 0;
    assert_int_equal(train_prom_server_start(NULL, 0, &s, &port), 0);
    assert_true(port > 0);
    train_prom_server_set(s, "whale_loss 1.5\n", 15);
    char buf[4096];
    http_get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", buf, sizeof buf);
    assert_non_null(strstr(buf, "HTTP/1.0 200 OK"));
    assert_non_null(strstr(buf, "Content-Type: text/plain; version=0.0.4"));
    assert_non_null(strstr(buf, "\r\n\r\nwhale_loss 1.5\n"));
    http_get(port, "GET /etc/passwd HTTP/1.1\r\n\r\n", buf, sizeof buf);
    assert_non_null(strstr(buf, "404"));
    http_get(port, "POST /metrics HTTP/1.1\r\n\r\n", buf, sizeof buf);
    assert_non_null(strstr(buf, "404"));
    train_prom_server_stop(s);
    struct train_prom_server *bad = NULL;
    assert_true(train_prom_server_start("not-an-address", 0, &bad, &port) < 0);
    assert_null(bad);
}

static void test_sysmon(void **st)
{
    (void)st;
    struct train_sysmon m;
    train_sysmon_init(&m);
    volatile double x = 0;
    for (long i = 0; i < 30000000; i++) /* some CPU time to measure */
        x += (double)i * 1e-9;
    struct train_sys s;
    train_sysmon_sample(&m, &s);
    assert_true(s.cpu_util > 0);
    assert_true(s.rss_mb > 0);
    json_t *j = json_object();
    train_sys_json(&s, j);
    assert_non_null(json_object_get(j, "cpu_util"));
    assert_non_null(json_object_get(j, "rss_mb"));
    if (!m.nvml) /* no driver or GPU: left out, never 0 */
        assert_null(json_object_get(j, "gpu_util"));
    if (s.have_node)
        assert_true(s.iowait >= 0 && s.iowait <= 1 && s.node_cpu_util >= 0 &&
                    s.node_cpu_util <= 1);
    json_decref(j);
    /* Steps far shorter than a /proc/stat tick (the CI failure: a 12-step
     * run whose step 5 had no node figures): back-to-back samples still
     * carry the node fields, the last full window's, within 0..1. */
    for (int i = 0; i < 50 && m.have_stat; i++) {
        train_sysmon_sample(&m, &s);
        assert_true(s.have_node);
        assert_true(s.iowait >= 0 && s.iowait <= 1 && s.node_cpu_util >= 0 &&
                    s.node_cpu_util <= 1);
        j = json_object();
        train_sys_json(&s, j);
        assert_non_null(json_object_get(j, "node_cpu_util"));
        assert_non_null(json_object_get(j, "iowait"));
        json_decref(j);
    }
    train_sysmon_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cost),       cmocka_unit_test(test_prom_text),
        cmocka_unit_test(test_prom_file),  cmocka_unit_test(test_prom_server),
        cmocka_unit_test(test_sysmon),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
