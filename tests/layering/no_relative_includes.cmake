cmake_minimum_required(VERSION 3.25)
# Fails when a source of the library, the strata command, the benchmarks or the tests includes a
# header by a path that climbs out of its directory, which the per-part include roots cannot stop.
file(GLOB_RECURSE files ${ROOT}/src/*.[ch] ${ROOT}/include/*.h ${ROOT}/tools/*.[ch]
     ${ROOT}/bench/*.[ch] ${ROOT}/tests/*.[ch])
set(bad "")
foreach(f ${files})
  file(STRINGS ${f} hits REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<][^\">]*\\.\\./")
  if(hits)
    list(APPEND bad "${f}: ${hits}")
  endif()
endforeach()
if(bad)
  string(REPLACE ";" "\n" bad "${bad}")
  message(FATAL_ERROR "includes that climb out of their directory:\n${bad}")
endif()
message(STATUS "no include climbs out of its directory (${ROOT})")
