# gen_patterns.cmake — the pattern suite of `onyx test --patterns`
# (tools/gen_patterns.py), included where the onyx_cli target is defined.
#
# The suite is generated at build time into ${PROJECT_BINARY_DIR}/<datadir>/onyx/patterns,
# the install layout mirrored in the build tree, so build/bin/onyx and an
# installed PREFIX/bin/onyx both find it at ../<datadir>/onyx/patterns. It
# needs Debian's /usr/bin/python3 with python3-onnx and python3-numpy, at
# build time only; without them the suite is absent, `onyx test --patterns`
# says so, and the tests that use it skip (exit 77).
target_compile_definitions(onyx_cli PRIVATE ONYX_CLI_DATADIR="${CMAKE_INSTALL_DATADIR}")

set(ONYX_PATTERNS_DIR "${PROJECT_BINARY_DIR}/${CMAKE_INSTALL_DATADIR}/onyx/patterns")
set(ONYX_PATTERNS_PYTHON3 /usr/bin/python3)
set(ONYX_PATTERNS_OK FALSE)
if(EXISTS ${ONYX_PATTERNS_PYTHON3})
  execute_process(COMMAND ${ONYX_PATTERNS_PYTHON3} -c "import onnx, numpy"
    RESULT_VARIABLE onyx_patterns_rc OUTPUT_QUIET ERROR_QUIET)
  if(onyx_patterns_rc EQUAL 0)
    set(ONYX_PATTERNS_OK TRUE)
  endif()
endif()

if(ONYX_PATTERNS_OK)
  set(onyx_patterns_stamp "${PROJECT_BINARY_DIR}/${CMAKE_INSTALL_DATADIR}/onyx/patterns.stamp")
  add_custom_command(OUTPUT ${onyx_patterns_stamp}
    COMMAND ${ONYX_PATTERNS_PYTHON3} ${PROJECT_SOURCE_DIR}/tools/gen_patterns.py ${ONYX_PATTERNS_DIR}
    COMMAND ${CMAKE_COMMAND} -E touch ${onyx_patterns_stamp}
    DEPENDS ${PROJECT_SOURCE_DIR}/tools/gen_patterns.py
    COMMENT "Generating the pattern suite (tools/gen_patterns.py)"
    VERBATIM)
  add_custom_target(onyx_patterns ALL DEPENDS ${onyx_patterns_stamp})
  install(DIRECTORY ${ONYX_PATTERNS_DIR} DESTINATION ${CMAKE_INSTALL_DATADIR}/onyx)
  message(STATUS "pattern suite: generated into ${ONYX_PATTERNS_DIR}")
else()
  message(STATUS "pattern suite: not generated (/usr/bin/python3 with the onnx and numpy "
                 "packages not found: apt-get install python3-onnx python3-numpy)")
endif()
