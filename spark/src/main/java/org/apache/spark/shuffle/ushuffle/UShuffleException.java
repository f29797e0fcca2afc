package org.apache.spark.shuffle.ushuffle;

import java.io.IOException;

/** A libushuffle call failed: the library's message, and its code (a
 *  negative errno or USH_E* value) to tell lost data from misuse. */
public final class UShuffleException extends IOException {
  private static final long serialVersionUID = 1L;

  private final int code;

  public UShuffleException(String message, int code) {
    super(message);
    this.code = code;
  }

  public int code() {
    return code;
  }

  /**
   * True when rerunning the maps can mend a failed read: a worker gone,
   * restarted without the data, or shutting down; data not committed where
   * its status says; a corrupt frame or status. Anything else (a wrong key
   * or secret, bad arguments, no memory) fails the task instead.
   */
  boolean isFetchFailure() {
    switch (code) {
      case -4001: // USH_ECORRUPT
      case -4002: // USH_ECRC
      case -4004: // USH_ENOTCOMMITTED
      case -5:    // EIO
      case -32:   // EPIPE
      case -103:  // ECONNABORTED
      case -104:  // ECONNRESET
      case -107:  // ENOTCONN
      case -108:  // ESHUTDOWN
      case -110:  // ETIMEDOUT
      case -111:  // ECONNREFUSED
      case -113:  // EHOSTUNREACH
        return true;
      default:
        return false;
    }
  }
}
