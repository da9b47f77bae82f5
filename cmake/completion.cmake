# SPDX-License-Identifier: MIT
# cmake -DDLOCK=path/to/dlock -DOUT=file -P completion.cmake: the bash
# completion script, as the built command prints it from its own tables.
execute_process(COMMAND ${DLOCK} completion bash OUTPUT_FILE ${OUT}.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${DLOCK} completion bash failed: ${rc}")
endif()
file(RENAME ${OUT}.tmp ${OUT})
