package org.apache.spark.shuffle.ushuffle;

import java.io.IOException;

/** A libushuffle call failed: the library's message, and its code (a
 *  negative errno or USH_E* value) to tell lost data from misuse. */
public final class UShuffleException extends IOException {
  private static final long serialVersionUID = 1L;

  /** Codes the library returns (include/ushuffle/ushuffle.h). */
  static final int ECORRUPT = -4001, ECRC = -4002, EVERSION = -4003,
      ENOTCOMMITTED = -4004, EDRAINING = -4009;
  static final int EPERM = -1, ENOKEY = -126, EACCES = -13, EKEYREJECTED = -129;

  private final int code;

  public UShuffleException(String message, int code) {
    super(message);
    this.code = code;
  }

  public int code() {
    return code;
  }

  /** True when rerunning the maps cannot help: a key, secret or
   *  permission the application was given is wrong. */
  boolean isConfiguration() {
    return code == ENOKEY || code == EPERM || code == EACCES || code == EKEYREJECTED;
  }
}
