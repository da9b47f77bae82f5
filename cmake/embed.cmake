# SPDX-License-Identifier: MIT
# Turn a text file into a C string constant: cmake -DIN=f -DOUT=f.c -DNAME=sym -P embed.cmake
# With -DLUA_MAIN=1 (the Redis lock script, which defines main(KEYS, ARGV)) it
# writes four: NAME_function (dlock_ and the first 16 hex digits of the
# file's SHA-1: a name for this version), NAME_library (a Redis function
# library registering main under that name), NAME (the same code as a script
# for EVAL, returning main's result) and NAME_sha (that script's SHA-1, the
# name EVALSHA knows it by).
file(READ ${IN} content)
string(SHA1 sum "${content}")
string(SUBSTRING "${sum}" 0 16 id)
if(LUA_MAIN)
  set(library "#!lua name=dlock_${id}\n${content}\nredis.register_function('dlock_${id}', main)\n")
  set(content "${content}\nreturn main(KEYS, ARGV)\n")
  string(SHA1 sha "${content}")
endif()
function(c_string text out)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  string(REPLACE "\n" "\\n\"\n\"" text "${text}")
  set(${out} "\"${text}\"" PARENT_SCOPE)
endfunction()
c_string("${content}" body)
set(code "/* generated from ${IN}: do not edit */\nconst char ${NAME}[] =\n${body};\n")
if(LUA_MAIN)
  c_string("${library}" lib)
  string(APPEND code "const char ${NAME}_sha[] = \"${sha}\";\n"
                     "const char ${NAME}_function[] = \"dlock_${id}\";\n"
                     "const char ${NAME}_library[] =\n${lib};\n")
endif()
file(WRITE ${OUT} "${code}")
