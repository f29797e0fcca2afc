# The library's dependencies as imported targets (ushuffle::uring, ::lz4,
# ::zstd, ::isal, ::crypto), so their include and link paths travel with them. Used
# by the build and, installed, by ushuffleConfig.cmake for the static
# library's consumers.
include_guard(GLOBAL)
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
# libcrypto (OpenSSL, Debian libssl-dev): HMAC-SHA256 of the handshake.
foreach(dep uring:liburing>=2.3 lz4:liblz4 zstd:libzstd crypto:libcrypto)
  string(REPLACE ":" ";" dep "${dep}")
  list(GET dep 0 name)
  list(GET dep 1 module)
  if(NOT TARGET ushuffle::${name})
    pkg_check_modules(USH_PC_${name} REQUIRED IMPORTED_TARGET GLOBAL ${module})
    add_library(ushuffle::${name} ALIAS PkgConfig::USH_PC_${name})
  endif()
endforeach()
# ISA-L ships no pkg-config file in Debian 12.
if(NOT TARGET ushuffle::isal)
  find_path(USH_ISAL_INCLUDE_DIR isa-l/crc.h REQUIRED)
  find_library(USH_ISAL_LIBRARY isal REQUIRED)
  add_library(ushuffle::isal UNKNOWN IMPORTED GLOBAL)
  set_target_properties(ushuffle::isal PROPERTIES
    IMPORTED_LOCATION ${USH_ISAL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${USH_ISAL_INCLUDE_DIR})
endif()
