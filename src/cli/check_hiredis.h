/*
 * check_hiredis.h — hiredis for `dlock bench` and `dlock check`, when the
 * build has it (bench_redis.c, check_servers.c).
 *
 * The library links hiredis only when its Redis backends are built, so the
 * functions used here are weak references: a build without them still links,
 * and ms_redis_usable() then says so at run time.
 */
#ifndef DLOCK_CLI_CHECK_HIREDIS_H
#define DLOCK_CLI_CHECK_HIREDIS_H

#if __has_include(<hiredis/hiredis.h>)
#include <hiredis/hiredis.h>
#define MS_HIREDIS 1
extern __typeof__(redisConnectWithTimeout) redisConnectWithTimeout __attribute__((weak));
extern __typeof__(redisSetTimeout) redisSetTimeout __attribute__((weak));
extern __typeof__(redisFree) redisFree __attribute__((weak));
extern __typeof__(redisCommandArgv) redisCommandArgv __attribute__((weak));
extern __typeof__(redisAppendCommandArgv) redisAppendCommandArgv __attribute__((weak));
extern __typeof__(redisBufferWrite) redisBufferWrite __attribute__((weak));
extern __typeof__(redisGetReply) redisGetReply __attribute__((weak));
extern __typeof__(freeReplyObject) freeReplyObject __attribute__((weak));
#endif

#endif
