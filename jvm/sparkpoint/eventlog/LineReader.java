package sparkpoint.eventlog;

import java.io.Closeable;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.List;

/**
 * A task's byte ranges as records: each {@link #next()} makes {@link #line()}
 * the next record's bytes (without its newline), read in chunks of a
 * megabyte. The span is valid until the next call.
 */
final class LineReader implements Closeable {
    static final int CHUNK = 1 << 20;

    /** A record's bytes: {@code bytes[offset, offset + length)}. */
    static final class Line {
        byte[] bytes;
        int offset;
        int length;
    }

    private final Iterator<LogPartition.ByteRange> ranges;
    private final Line line = new Line();
    private LogPartition.ByteRange range;
    private FileChannel channel;
    private long position;
    private byte[] buffer = new byte[0];
    private int lineStart;
    private int scanned;

    LineReader(List<LogPartition.ByteRange> ranges) {
        this.ranges = ranges.iterator();
    }

    Line line() {
        return line;
    }

    /** Move to the next record; false after the last. */
    boolean next() throws IOException {
        while (true) {
            for (int i = scanned; i < buffer.length; i++) {
                if (buffer[i] == '\n') {
                    line.bytes = buffer;
                    line.offset = lineStart;
                    line.length = i - lineStart;
                    lineStart = i + 1;
                    scanned = lineStart;
                    return true;
                }
            }
            scanned = buffer.length;
            if (!fill()) {
                return false;
            }
        }
    }

    @Override
    public void close() throws IOException {
        if (channel != null) {
            channel.close();
            channel = null;
        }
    }

    /** Read the next chunk after what is left of the current one; false after the last range. */
    private boolean fill() throws IOException {
        while (range == null || position == range.stop()) {
            if (lineStart < buffer.length) {
                throw new IOException(range.path() + ": no record boundary at offset " + range.stop()
                        + " (was the log truncated or rewritten?)");
            }
            close();
            if (!ranges.hasNext()) {
                return false;
            }
            range = ranges.next();
            position = range.begin();
            channel = FileChannel.open(Path.of(range.path()), StandardOpenOption.READ);
        }
        int carried = buffer.length - lineStart;
        byte[] next = new byte[carried + (int) Math.min(CHUNK, range.stop() - position)];
        System.arraycopy(buffer, lineStart, next, 0, carried);
        ByteBuffer target = ByteBuffer.wrap(next, carried, next.length - carried);
        while (target.hasRemaining()) {
            int n = channel.read(target, position);
            if (n < 0) {
                throw new IOException(range.path() + ": expected bytes up to offset " + range.stop()
                        + ", the file ends at " + position + " (was the log truncated?)");
            }
            position += n;
        }
        buffer = next;
        scanned = carried;
        lineStart = 0;
        return true;
    }
}
