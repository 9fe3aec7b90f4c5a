# Writes the minimal provider of onyx_ep.h's top comment to a C file, so the
# comment is compiled and run (test_minimal_provider) and cannot go stale.
#
#   cmake -DIN=sdk/include/onyx/onyx_ep.h -DOUT=minimal_provider.c -P extract_example.cmake
#
# The example is the run of lines indented as " *   code" that follows the
# line " * A minimal provider" in the header's first comment.
if(NOT IN OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DIN=onyx_ep.h -DOUT=file.c -P extract_example.cmake")
endif()
file(READ "${IN}" text)
string(FIND "${text}" "*/" comment_end)
if(comment_end LESS 0)
  message(FATAL_ERROR "${IN}: no comment at the top")
endif()
string(SUBSTRING "${text}" 0 ${comment_end} comment)
string(FIND "${comment}" "\n * A minimal provider" start)
if(start LESS 0)
  message(FATAL_ERROR "${IN}: the top comment has no ' * A minimal provider' paragraph")
endif()
string(SUBSTRING "${comment}" ${start} -1 rest)
string(REGEX MATCH "\n( \\*   [^\n]*\n)+" block "${rest}")
string(REGEX REPLACE "\n \\*   " "\n" code "${block}")
string(FIND "${code}" "onyx_provider_init" has_init)
if(has_init LESS 0)
  message(FATAL_ERROR "${IN}: the example in the top comment defines no onyx_provider_init")
endif()
file(WRITE "${OUT}.tmp" "/* Extracted from ${IN} by extract_example.cmake: do not edit. */${code}")
# Only a changed example rebuilds the provider.
execute_process(COMMAND "${CMAKE_COMMAND}" -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
