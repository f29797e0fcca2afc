# Run by `cmake --install` (install(SCRIPT)): the systemd unit, ushuffled's
# config and the sysusers file name the directories of the prefix being
# installed to, which `cmake --install --prefix` may choose after
# configuring. The relative CMAKE_INSTALL_<dir> values and USH_SOURCE_DIR,
# USH_BINARY_DIR, USH_UNITDIR come from the configure step (install(CODE)).

# GNUInstallDirs' CMAKE_INSTALL_FULL_<dir> rules, for this prefix.
function(ush_full_dir out dir rel)
  set(p "${CMAKE_INSTALL_PREFIX}")
  if(IS_ABSOLUTE "${rel}")
    set(full "${rel}")
  elseif(dir MATCHES "^(SYSCONF|LOCALSTATE)DIR$" AND p MATCHES "^/(usr/?)?$")
    set(full "/${rel}")
  elseif(dir MATCHES "^(SYSCONF|LOCALSTATE)DIR$" AND p MATCHES "^/opt/")
    set(full "/${rel}${p}")
  else()
    set(full "${p}/${rel}")
  endif()
  set(${out} "${full}" PARENT_SCOPE)
endfunction()

ush_full_dir(USH_BINDIR BINDIR "${USH_INSTALL_BINDIR}")
ush_full_dir(USH_SYSCONFDIR SYSCONFDIR "${USH_INSTALL_SYSCONFDIR}")
ush_full_dir(USH_LOCALSTATEDIR LOCALSTATEDIR "${USH_INSTALL_LOCALSTATEDIR}")
ush_full_dir(_unitdir UNITDIR "${USH_UNITDIR}")
ush_full_dir(_sysusersdir UNITDIR "${USH_SYSUSERSDIR}")

# In the build tree: `cmake --install` runs this from any directory, and
# CMAKE_CURRENT_BINARY_DIR is that directory.
set(_tmp "${USH_BINARY_DIR}/dist-install")
configure_file("${USH_SOURCE_DIR}/dist/ushuffled.service.in"
  "${_tmp}/ushuffled.service" @ONLY)
configure_file("${USH_SOURCE_DIR}/dist/ushuffled.conf.in"
  "${_tmp}/ushuffled.conf" @ONLY)
configure_file("${USH_SOURCE_DIR}/dist/ushuffle.sysusers.in"
  "${_tmp}/ushuffle.conf" @ONLY)
# file(INSTALL) adds $DESTDIR, as install(FILES) does.
file(INSTALL "${_tmp}/ushuffled.service" DESTINATION "${_unitdir}")
file(INSTALL "${_tmp}/ushuffled.conf" DESTINATION "${USH_SYSCONFDIR}/ushuffle")
file(INSTALL "${_tmp}/ushuffle.conf" DESTINATION "${_sysusersdir}")
