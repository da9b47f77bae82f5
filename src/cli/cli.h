/* cli.h — pieces of the dlock command shared between its files. */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

/* Exit codes of the dlock command (documented in --help and dlock(1)). */
enum {
    CLI_EXIT_NOT_ACQUIRED = 1, /* default for "not acquired in time" (-E overrides) */
    CLI_EXIT_USAGE = 64,       /* EX_USAGE */
    CLI_EXIT_UNAVAILABLE = 69, /* EX_UNAVAILABLE: backend unreachable */
    CLI_EXIT_SOFTWARE = 70,    /* EX_SOFTWARE: other internal failure */
    CLI_EXIT_LOST = 75,        /* the lock was lost while the command ran */
    CLI_EXIT_CANNOT_EXEC = 126,
    CLI_EXIT_NOT_FOUND = 127
};

/* Subcommands implemented in their own files. argv[0] is the subcommand
 * name; url is the resolved backend URL (NULL: default). Return exit code. */
int cli_bench(int argc, char **argv, const char *url);
int cli_check(int argc, char **argv, const char *url);

#endif
