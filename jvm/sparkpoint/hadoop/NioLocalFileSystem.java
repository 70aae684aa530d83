package sparkpoint.hadoop;

import static java.nio.file.attribute.PosixFilePermission.GROUP_EXECUTE;
import static java.nio.file.attribute.PosixFilePermission.GROUP_READ;
import static java.nio.file.attribute.PosixFilePermission.GROUP_WRITE;
import static java.nio.file.attribute.PosixFilePermission.OTHERS_EXECUTE;
import static java.nio.file.attribute.PosixFilePermission.OTHERS_READ;
import static java.nio.file.attribute.PosixFilePermission.OTHERS_WRITE;
import static java.nio.file.attribute.PosixFilePermission.OWNER_EXECUTE;
import static java.nio.file.attribute.PosixFilePermission.OWNER_READ;
import static java.nio.file.attribute.PosixFilePermission.OWNER_WRITE;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * The worker's local file system ({@code fs.file.impl}): Hadoop's raw local
 * file system, with permissions set in the JVM.
 *
 * <p>Without Hadoop's native library (Spark ships none), RawLocalFileSystem
 * sets the permission of every file and directory it creates by running a
 * {@code chmod} process. Spark creates several per batch and query (offsets,
 * commits, state deltas, staged Parquet files and their directories): a
 * stream of process spawns from a large JVM, each exec read through the
 * container's file system. {@code java.nio} does the same with one system
 * call. Raw, not checksummed: nothing reads Hadoop's {@code .crc} side files
 * (the worker's checkpoints leave them out), so they are not written.
 */
public class NioLocalFileSystem extends RawLocalFileSystem {
  private static final PosixFilePermission[] BITS = {
    OWNER_READ, OWNER_WRITE, OWNER_EXECUTE,
    GROUP_READ, GROUP_WRITE, GROUP_EXECUTE,
    OTHERS_READ, OTHERS_WRITE, OTHERS_EXECUTE,
  };

  @Override
  public void setPermission(Path p, FsPermission permission) throws IOException {
    Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(permission.toShort()));
  }

  /** The rwx bits of a mode (sticky and set-id bits have no java.nio form; Spark sets none). */
  static Set<PosixFilePermission> posix(int mode) {
    Set<PosixFilePermission> permissions = EnumSet.noneOf(PosixFilePermission.class);
    for (int i = 0; i < BITS.length; i++) {
      if ((mode & (0400 >> i)) != 0) {
        permissions.add(BITS[i]);
      }
    }
    return permissions;
  }
}
