/* SPDX-License-Identifier: MIT */
/* signals.c — the self-pipe through which run.c and child.c receive
 * signals. It lives apart from both so that each can use it without the
 * other: run.c sets it up and waits on it, child.c (the supervisor, the
 * forked command and guardian) uses it after that. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const int handled[] = {SIGINT,  SIGTERM,  SIGHUP,  SIGQUIT, SIGUSR1,
                              SIGUSR2, SIGWINCH, SIGCONT, SIGCHLD};
#define NHANDLED (sizeof handled / sizeof handled[0])

static int sig_pipe[2] = {-1, -1};
static struct sigaction old_act[NHANDLED], old_pipe_act;
static int installed[NHANDLED], pipe_ignored;
static sigset_t handled_set, orig_mask, poll_mask;

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(sig_pipe[1], &b, 1) < 0) {
        /* pipe full: plenty of wake-ups are already pending */
    }
    errno = saved;
}

int cli_sig_setup(void)
{
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    sigemptyset(&handled_set);
    for (size_t i = 0; i < NHANDLED; i++)
        sigaddset(&handled_set, handled[i]);
    if (pthread_sigmask(SIG_BLOCK, &handled_set, &orig_mask) != 0)
        return -1;
    poll_mask = orig_mask;
    for (size_t i = 0; i < NHANDLED; i++)
        sigdelset(&poll_mask, handled[i]);
    for (size_t i = 0; i < NHANDLED; i++) {
        if (sigaction(handled[i], NULL, &old_act[i]) < 0)
            return -1;
        /* A signal our caller ignores (nohup, "cmd &" in a script ignoring
         * INT and QUIT) stays ignored, for us and for the command. SIGCHLD
         * is ours: ignoring it would reap the command behind our back. */
        if (old_act[i].sa_handler == SIG_IGN && handled[i] != SIGCHLD)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigfillset(&sa.sa_mask);
        if (sigaction(handled[i], &sa, NULL) < 0)
            return -1;
        installed[i] = 1;
    }
    /* Writing to a closed stdout is an error to report, not a silent death. */
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    if (sigaction(SIGPIPE, &ign, &old_pipe_act) < 0)
        return -1;
    pipe_ignored = 1;
    return 0;
}

void cli_sig_restore(void)
{
    for (size_t i = 0; i < NHANDLED; i++)
        if (installed[i])
            sigaction(handled[i], &old_act[i], NULL);
    if (pipe_ignored)
        sigaction(SIGPIPE, &old_pipe_act, NULL);
    sigprocmask(SIG_SETMASK, &orig_mask, NULL);
}

void cli_sig_forget(void)
{
    if (sig_pipe[0] >= 0)
        close(sig_pipe[0]);
    if (sig_pipe[1] >= 0)
        close(sig_pipe[1]);
}

void cli_sig_teardown(void)
{
    cli_sig_restore();
    cli_sig_forget();
    sig_pipe[0] = sig_pipe[1] = -1;
}

int cli_sig_fd(void)
{
    return sig_pipe[0];
}

int cli_sig_next(void)
{
    unsigned char b;
    ssize_t r;
    do
        r = read(sig_pipe[0], &b, 1);
    while (r < 0 && errno == EINTR);
    return r == 1 ? b : 0;
}

const sigset_t *cli_sig_handled(void)
{
    return &handled_set;
}

const sigset_t *cli_sig_pollmask(void)
{
    return &poll_mask;
}

int cli_sig_terminates(int sig)
{
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

int cli_sig_die(int sig, int whole_group)
{
    /* The command's core file, if any, is the one that matters. */
    struct rlimit none = {0, 0};
    (void)setrlimit(RLIMIT_CORE, &none);
    fflush(stdout);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) == 0) {
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        if (whole_group)
            (void)kill(0, sig);
        else
            (void)raise(sig);
        (void)sigprocmask(SIG_UNBLOCK, &one, NULL);
    }
    return 128 + sig; /* a signal whose default is not to terminate */
}
