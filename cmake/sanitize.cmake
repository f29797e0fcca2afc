# ush_sanitizer_preload(VAR): in an ASan/UBSan build, the sanitizer
# runtimes the libraries link, space-separated, for LD_PRELOAD into an
# uninstrumented host process that loads them (CPython, a JVM); empty
# otherwise. Not for TSan: its runtime cannot be preloaded into a process
# that has started threads.
function(ush_sanitizer_preload var)
  set(_preload "")
  if(NOT "thread" IN_LIST USH_SANITIZE)
    foreach(s address undefined)
      if(s IN_LIST USH_SANITIZE)
        string(REPLACE "address" "asan" _rt ${s})
        string(REPLACE "undefined" "ubsan" _rt ${_rt})
        execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=lib${_rt}.so
          OUTPUT_VARIABLE _lib OUTPUT_STRIP_TRAILING_WHITESPACE)
        string(APPEND _preload " ${_lib}")
      endif()
    endforeach()
  endif()
  string(STRIP "${_preload}" _preload)
  set(${var} "${_preload}" PARENT_SCOPE)
endfunction()
