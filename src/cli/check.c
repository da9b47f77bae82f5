/* check.c — `dlock check` (SPEC §8). Placeholder until the measurement issue lands. */
#include "cli.h"
#include <stdio.h>

int cli_check(int argc, char **argv, const char *url)
{
    (void)argc; (void)argv; (void)url;
    fprintf(stderr, "dlock: check: not built yet\n");
    return CLI_EXIT_SOFTWARE;
}
