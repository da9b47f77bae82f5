/* bench.c — `dlock bench` (SPEC §7). Placeholder until the measurement issue lands. */
#include "cli.h"
#include <stdio.h>

int cli_bench(int argc, char **argv, const char *url)
{
    (void)argc; (void)argv; (void)url;
    fprintf(stderr, "dlock: bench: not built yet\n");
    return CLI_EXIT_SOFTWARE;
}
