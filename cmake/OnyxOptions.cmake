# OnyxOptions.cmake — switches for optional dependencies, and the flags every
# Onyx target gets.
#
# Optional dependencies (a provider's toolchain, a header-only library):
#
#   onyx_dependency_option(NAME "what it builds")
#       declares the cache switch ONYX_WITH_<NAME> with three values:
#         AUTO (default)  build it when the dependency is found, else say
#                         what was skipped and why;
#         ON              the dependency is required: configuring fails with
#                         the reason when it is missing;
#         OFF             never look for it.
#       TRUE/YES/1 read as ON and FALSE/NO/0 as OFF, so a command line
#       written for a plain boolean option still configures.
#   onyx_dependency_wanted(NAME out_var)
#       out_var is TRUE unless the switch is OFF.
#   onyx_dependency_found(NAME "details" ["more details"...])
#       records and prints "<what>: building (<details>)"; the strings are
#       joined.
#   onyx_dependency_missing(NAME "reason" ["more reason"...])
#       with ON, fails the configure with the reason; with AUTO, records and
#       prints "<what>: skipped (<reason>)".
#   onyx_dependency_summary()
#       prints one line per switch at the end of configuring.
#
# Target defaults:
#
#   onyx_target_defaults(target)
#       the project's warnings (-Werror with ONYX_WERROR), _GNU_SOURCE and the
#       sanitizer or fuzzer instrumentation, on the target's C sources only
#       (nvcc and hipcc take other flags).
#   onyx_apply_target_defaults(dir)
#       onyx_target_defaults on every C-building target defined in dir and
#       the folders below it; the top-level CMakeLists.txt calls it once on
#       the project's own folder at the end, so every target gets the same
#       policy and a new target needs nothing. A target that sets the
#       property ONYX_NO_DEFAULTS is left alone.

function(onyx_dependency_option name doc)
  set(var ONYX_WITH_${name})
  # A cache that holds the switch as a BOOL comes from a build folder
  # configured with the two-valued option, where ON meant "when found": it is
  # read as AUTO (OFF stays OFF) and stored as a STRING from then on, so a
  # later -D${var}=ON means required.
  get_property(type CACHE ${var} PROPERTY TYPE)
  if(type STREQUAL "BOOL")
    if(${var})
      set_property(CACHE ${var} PROPERTY VALUE AUTO)
    endif()
    set_property(CACHE ${var} PROPERTY TYPE STRING)
  endif()
  set(${var} AUTO CACHE STRING "${doc}: AUTO (when found), ON (required) or OFF")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${var}}" value)
  if(value MATCHES "^(ON|TRUE|YES|Y|1)$")
    set(value ON)
  elseif(value MATCHES "^(OFF|FALSE|NO|N|0)$")
    set(value OFF)
  elseif(NOT value STREQUAL "AUTO")
    message(FATAL_ERROR "${var}=${${var}}: expected AUTO, ON or OFF")
  endif()
  set_property(GLOBAL PROPERTY ONYX_DEP_${name}_MODE ${value})
  set_property(GLOBAL PROPERTY ONYX_DEP_${name}_DOC "${doc}")
  set_property(GLOBAL APPEND PROPERTY ONYX_DEPS ${name})
  if(value STREQUAL "OFF")
    set_property(GLOBAL PROPERTY ONYX_DEP_${name}_STATE "off (ONYX_WITH_${name}=OFF)")
  else()
    set_property(GLOBAL PROPERTY ONYX_DEP_${name}_STATE "not looked for")
  endif()
endfunction()

function(onyx_dependency_wanted name out)
  get_property(mode GLOBAL PROPERTY ONYX_DEP_${name}_MODE)
  if(mode STREQUAL "")
    message(FATAL_ERROR "onyx_dependency_wanted(${name}): no onyx_dependency_option(${name})")
  endif()
  if(mode STREQUAL "OFF")
    set(${out} FALSE PARENT_SCOPE)
  else()
    set(${out} TRUE PARENT_SCOPE)
  endif()
endfunction()

function(onyx_dependency_found name details)
  # The text arguments joined as written (ARGN would split a value such as
  # "80;90" at its semicolons; ARGVn keeps it whole).
  set(details "")
  math(EXPR last "${ARGC} - 1")
  foreach(i RANGE 1 ${last})
    string(APPEND details "${ARGV${i}}")
  endforeach()
  get_property(doc GLOBAL PROPERTY ONYX_DEP_${name}_DOC)
  set_property(GLOBAL PROPERTY ONYX_DEP_${name}_STATE "building (${details})")
  message(STATUS "${doc}: building (${details})")
endfunction()

function(onyx_dependency_missing name reason)
  # The text arguments joined as written (ARGN would split a value such as
  # "80;90" at its semicolons; ARGVn keeps it whole).
  set(reason "")
  math(EXPR last "${ARGC} - 1")
  foreach(i RANGE 1 ${last})
    string(APPEND reason "${ARGV${i}}")
  endforeach()
  get_property(mode GLOBAL PROPERTY ONYX_DEP_${name}_MODE)
  get_property(doc GLOBAL PROPERTY ONYX_DEP_${name}_DOC)
  if(mode STREQUAL "ON")
    message(FATAL_ERROR "ONYX_WITH_${name}=ON but ${doc} cannot be built: ${reason}. "
                        "Install what is missing, or configure with -DONYX_WITH_${name}=AUTO "
                        "(build it only when found) or OFF.")
  endif()
  set_property(GLOBAL PROPERTY ONYX_DEP_${name}_STATE "skipped (${reason})")
  message(STATUS "${doc}: skipped (${reason})")
endfunction()

function(onyx_dependency_summary)
  get_property(names GLOBAL PROPERTY ONYX_DEPS)
  message(STATUS "Optional dependencies (ONYX_WITH_<NAME>=AUTO|ON|OFF):")
  foreach(name ${names})
    get_property(mode GLOBAL PROPERTY ONYX_DEP_${name}_MODE)
    get_property(state GLOBAL PROPERTY ONYX_DEP_${name}_STATE)
    message(STATUS "  ONYX_WITH_${name}=${mode}: ${state}")
  endforeach()
endfunction()

function(onyx_target_defaults target)
  set(opts -Wall -Wextra -Wno-unused-parameter -Wstrict-prototypes -Wvla)
  set(link_opts)
  if(ONYX_WERROR)
    list(APPEND opts -Werror)
  endif()
  if(ONYX_SANITIZE)
    list(APPEND opts -fsanitize=address,undefined -fno-omit-frame-pointer
      -fno-sanitize-recover=undefined)
    list(APPEND link_opts -fsanitize=address,undefined)
  endif()
  if(ONYX_TSAN)
    list(APPEND opts -fsanitize=thread -fno-omit-frame-pointer)
    list(APPEND link_opts -fsanitize=thread)
  endif()
  # libFuzzer builds (fuzz/): everything with coverage, ASan and UBSan; the
  # runtime is the shared one so the providers (linked with --no-undefined)
  # resolve it too.
  if(ONYX_FUZZ)
    list(APPEND opts -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
      -fno-sanitize-recover=undefined)
    list(APPEND link_opts -fsanitize=address,undefined -shared-libsan
      "-Wl,-rpath,${ONYX_CLANG_RT_DIR}")
  endif()
  # C sources only; BEFORE: the policy comes ahead of the target's own
  # options, so a target's -O3 or -w has the last word.
  list(TRANSFORM opts REPLACE "^(.+)$" "$<$<COMPILE_LANGUAGE:C>:\\1>")
  target_compile_options(${target} BEFORE PRIVATE ${opts})
  target_compile_definitions(${target} PRIVATE $<$<COMPILE_LANGUAGE:C>:_GNU_SOURCE>)
  get_target_property(type ${target} TYPE)
  if(link_opts AND type MATCHES "^(EXECUTABLE|SHARED_LIBRARY|MODULE_LIBRARY)$")
    target_link_options(${target} PRIVATE ${link_opts})
  endif()
endfunction()

function(onyx_apply_target_defaults dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    get_target_property(skip ${target} ONYX_NO_DEFAULTS)
    if(type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$"
       AND NOT skip)
      onyx_target_defaults(${target})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    onyx_apply_target_defaults(${sub})
  endforeach()
endfunction()
