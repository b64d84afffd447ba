/* Reading a memory-mapped data file that someone truncates meanwhile
 * raises SIGBUS on the first page past the new end. The copy from the map
 * runs inside data_guard_run(): a SIGBUS in that thread, during that copy,
 * jumps back and becomes an error naming the file; any other SIGBUS keeps
 * its previous disposition (re-raised with it). */
#define _GNU_SOURCE
#include "guard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>

static __thread sigjmp_buf *t_jmp;     /* set only while a guarded copy runs */
static struct sigaction g_prev;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_install_rc;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    sigjmp_buf *j = t_jmp;
    if (j) {
        t_jmp = NULL;
        siglongjmp(*j, 1);
    }
    /* not ours: the previous handler, or the default action */
    if (g_prev.sa_flags & SA_SIGINFO) {
        if (g_prev.sa_sigaction) {
            g_prev.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (g_prev.sa_handler != SIG_DFL && g_prev.sa_handler != SIG_IGN) {
        g_prev.sa_handler(sig);
        return;
    }
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    g_install_rc = sigaction(SIGBUS, &sa, &g_prev);
}

int data_guard_run(void (*fn)(void *), void *arg)
{
    pthread_once(&g_once, install);
    if (g_install_rc)
        return -1;
    sigjmp_buf jb;
    /* touch the thread-local slot outside the handler (first use may
     * allocate its storage) */
    t_jmp = NULL;
    if (sigsetjmp(jb, 1)) {
        t_jmp = NULL;
        return 1;
    }
    t_jmp = &jb;
    fn(arg);
    t_jmp = NULL;
    return 0;
}
