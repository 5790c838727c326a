# cs_fuzz.cmake - cs_add_fuzz_target(): libFuzzer targets built with clang,
# whatever compiler builds the rest of the project.
#
#   cs_add_fuzz_target(<name> <source> <corpus_dir> [<lib>...]
#                      [SEED_PROGRAM <target>] [MAX_TOTAL_TIME <seconds>])
#
# <source>     the fuzz entry (defines LLVMFuzzerTestOneInput), relative to the
#              calling folder or absolute.
# <corpus_dir> seed inputs (read-only for the fuzzer; a folder in the source tree
#              or one the SEED_PROGRAM fills). New inputs the fuzzer finds go to
#              <build>/<name>_work, crashes to <build>/<name>_artifacts/.
# <lib>...     what the code under test needs: a C source file (compiled with the
#              fuzz flags), a CMake library target (its C sources are rebuilt with
#              the fuzz flags so coverage is instrumented; its link interface is
#              followed: imported pkg-config targets give include dirs and
#              libraries), or anything else, passed to the link line as is.
#              Targets must already be defined: call this from tests/fuzz/CMakeLists.txt
#              (tests/ is added after the libraries).
# SEED_PROGRAM an executable target run as `<target> <corpus_dir>` in a ctest
#              fixture before the fuzz test, to write seeds with the real writers.
# MAX_TOTAL_TIME seconds of fuzzing in the ctest (default 30).
#
# Builds <name> (into the runtime output folder, bin/) with `clang -fsanitize=fuzzer,address,undefined` (UB aborts) and
# adds the ctest <name> (label "fuzz"). When clang with libFuzzer is not
# available, it prints one message and does nothing.
include_guard(GLOBAL)

set(CS_FUZZ_FLAGS -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
    -fno-omit-frame-pointer -std=gnu11)

function(_cs_fuzz_detect)
  if(DEFINED CACHE{CS_HAVE_LIBFUZZER})
    return()
  endif()
  find_program(CS_FUZZ_CLANG NAMES clang clang-18 clang-17 clang-16 clang-15 clang-14)
  set(ok OFF)
  if(CS_FUZZ_CLANG)
    set(dir ${CMAKE_BINARY_DIR}/CMakeFiles/cs_fuzz_probe)
    file(MAKE_DIRECTORY ${dir})
    file(WRITE ${dir}/probe.c
         "#include <stddef.h>\n#include <stdint.h>\n"
         "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return n && d[0] == 1; }\n")
    execute_process(COMMAND ${CS_FUZZ_CLANG} ${CS_FUZZ_FLAGS} ${dir}/probe.c -o ${dir}/probe
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0)
      set(ok ON)
    endif()
  endif()
  set(CS_HAVE_LIBFUZZER ${ok} CACHE BOOL "clang with libFuzzer builds the fuzz targets")
  if(ok)
    message(STATUS "cmpserve: fuzz targets built with ${CS_FUZZ_CLANG} (libFuzzer)")
  else()
    message(STATUS "cmpserve: no clang with libFuzzer, fuzz targets and their tests skipped")
  endif()
endfunction()

# Resolve libs into C sources, include dirs and link items (see above).
function(_cs_fuzz_resolve out_srcs out_incs out_link)
  set(srcs)
  set(incs)
  set(link)
  set(seen)
  set(queue ${ARGN})
  while(queue)
    list(POP_FRONT queue lib)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" lib "${lib}")
    if(lib STREQUAL "" OR lib MATCHES "\\$<" OR lib MATCHES "-NOTFOUND$" OR lib IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${lib})
    if(TARGET ${lib})
      get_target_property(alias ${lib} ALIASED_TARGET)
      if(alias)
        list(APPEND queue ${alias})
        continue()
      endif()
      get_target_property(imported ${lib} IMPORTED)
      get_target_property(inc ${lib} INTERFACE_INCLUDE_DIRECTORIES)
      get_target_property(deps ${lib} INTERFACE_LINK_LIBRARIES)
      list(APPEND incs ${inc})
      list(APPEND queue ${deps})
      if(imported)
        get_target_property(loc ${lib} IMPORTED_LOCATION)
        list(APPEND link ${loc})
        continue()
      endif()
      get_target_property(dir ${lib} SOURCE_DIR)
      get_target_property(tsrc ${lib} SOURCES)
      get_target_property(tinc ${lib} INCLUDE_DIRECTORIES)
      get_target_property(tdeps ${lib} LINK_LIBRARIES)
      list(APPEND incs ${tinc})
      list(APPEND queue ${tdeps})
      foreach(s ${tsrc})
        if(s MATCHES "\\.c$")
          get_filename_component(s ${s} ABSOLUTE BASE_DIR ${dir})
          list(APPEND srcs ${s})
        endif()
      endforeach()
    elseif(lib MATCHES "\\.c$")
      get_filename_component(s ${lib} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
      list(APPEND srcs ${s})
    elseif(NOT lib MATCHES "::")
      list(APPEND link ${lib})
    endif()
  endwhile()
  list(FILTER incs EXCLUDE REGEX "(-NOTFOUND$|\\$<)")
  list(FILTER link EXCLUDE REGEX "-NOTFOUND$")
  list(REMOVE_DUPLICATES srcs)
  list(REMOVE_DUPLICATES incs)
  set(${out_srcs} ${srcs} PARENT_SCOPE)
  set(${out_incs} ${incs} PARENT_SCOPE)
  set(${out_link} ${link} PARENT_SCOPE)
endfunction()

function(cs_add_fuzz_target name source corpus_dir)
  cmake_parse_arguments(F "" "SEED_PROGRAM;MAX_TOTAL_TIME" "" ${ARGN})
  _cs_fuzz_detect()
  if(NOT CS_HAVE_LIBFUZZER)
    return()
  endif()
  if(NOT F_MAX_TOTAL_TIME)
    set(F_MAX_TOTAL_TIME 30)
  endif()
  get_filename_component(root ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../.. ABSOLUTE)
  _cs_fuzz_resolve(srcs incs link ${source} ${F_UNPARSED_ARGUMENTS})
  set(incflags -I${root})
  foreach(i ${incs})
    list(APPEND incflags -I${i})
  endforeach()
  # one object per source, with a depfile so header edits rebuild it
  set(objdir ${CMAKE_CURRENT_BINARY_DIR}/${name}_objs)
  file(MAKE_DIRECTORY ${objdir})
  set(objs)
  set(n 0)
  foreach(s ${srcs})
    get_filename_component(stem ${s} NAME_WE)
    set(o ${objdir}/${n}_${stem}.o)
    math(EXPR n "${n} + 1")
    add_custom_command(OUTPUT ${o}
      COMMAND ${CS_FUZZ_CLANG} ${CS_FUZZ_FLAGS} ${incflags} -MD -MF ${o}.d -c ${s} -o ${o}
      DEPENDS ${s} DEPFILE ${o}.d COMMENT "fuzz: compiling ${stem}.c for ${name}" VERBATIM)
    list(APPEND objs ${o})
  endforeach()
  set(exe ${CMAKE_CURRENT_BINARY_DIR}/bin/${name})
  if(CMAKE_RUNTIME_OUTPUT_DIRECTORY)
    set(exe ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/${name})
  endif()
  add_custom_command(OUTPUT ${exe}
    COMMAND ${CS_FUZZ_CLANG} ${CS_FUZZ_FLAGS} ${objs} -o ${exe} ${link} -pthread -lm
    DEPENDS ${objs} COMMENT "fuzz: linking ${name}" VERBATIM)
  add_custom_target(${name} ALL DEPENDS ${exe})

  set(work ${CMAKE_CURRENT_BINARY_DIR}/${name}_work)
  set(art ${CMAKE_CURRENT_BINARY_DIR}/${name}_artifacts)
  file(MAKE_DIRECTORY ${work} ${art} ${corpus_dir})
  add_test(NAME ${name}
           COMMAND ${exe} -max_total_time=${F_MAX_TOTAL_TIME} -timeout=10 -rss_limit_mb=2048
                   -print_final_stats=1 -artifact_prefix=${art}/ ${work} ${corpus_dir})
  math(EXPR limit "${F_MAX_TOTAL_TIME} + 90")
  set_tests_properties(${name} PROPERTIES TIMEOUT ${limit} LABELS fuzz)
  if(F_SEED_PROGRAM)
    add_test(NAME ${name}_seeds COMMAND ${F_SEED_PROGRAM} ${corpus_dir})
    set_tests_properties(${name}_seeds PROPERTIES FIXTURES_SETUP ${name}_seeds
                         LABELS fuzz TIMEOUT 60)
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED ${name}_seeds)
  endif()
endfunction()
