# Turn a text file into a C string constant: cmake -DIN=f -DOUT=f.c -DNAME=sym -P embed.cmake
file(READ ${IN} content)
string(REPLACE "\\" "\\\\" content "${content}")
string(REPLACE "\"" "\\\"" content "${content}")
string(REPLACE "\n" "\\n\"\n\"" content "${content}")
file(WRITE ${OUT} "/* generated from ${IN}: do not edit */\nconst char ${NAME}[] =\n\"${content}\";\n")
