# Writes the first ```c fenced code block of a Markdown file to a C file.
#
#   cmake -DIN=README.md -DOUT=readme_example.c -P extract_readme_example.cmake
#
# A #line directive points compiler messages at the README itself. The output is
# rewritten only when it changes, so an edit elsewhere in the README rebuilds nothing.
if(NOT DEFINED IN OR NOT DEFINED OUT)
  message(FATAL_ERROR "usage: cmake -DIN=README.md -DOUT=file.c -P ${CMAKE_CURRENT_LIST_FILE}")
endif()

file(READ "${IN}" text)
string(REPLACE "\r\n" "\n" text "${text}")
set(text "\n${text}") # so that a fence on the first line is found too

string(FIND "${text}" "\n```c\n" open)
if(open EQUAL -1)
  message(FATAL_ERROR "${IN}: no ```c code block")
endif()
math(EXPR body_start "${open} + 6")
string(SUBSTRING "${text}" ${body_start} -1 rest)
string(FIND "${rest}" "\n```" close)
if(close EQUAL -1)
  message(FATAL_ERROR "${IN}: the first ```c code block is not closed")
endif()
math(EXPR body_len "${close} + 1") # keep the last line's newline
string(SUBSTRING "${rest}" 0 ${body_len} body)

# Line of the README where the code starts (1-based): newlines before it, less the one
# added above, plus one for the fence line.
string(SUBSTRING "${text}" 0 ${body_start} before)
string(REGEX MATCHALL "\n" newlines "${before}")
list(LENGTH newlines first_line)

set(content "/* Generated from ${IN} by ${CMAKE_CURRENT_LIST_FILE}: edit the README. */\n")
string(APPEND content "#line ${first_line} \"${IN}\"\n${body}")

if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL content)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${content}")
