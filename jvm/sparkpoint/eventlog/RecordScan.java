package sparkpoint.eventlog;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;

/**
 * Byte scans that find record boundaries in a partition file without reading
 * it from its start (the JVM's twin of {@code sparkpoint/eventlog/scan.py}).
 *
 * <p>A record ends with {@code \n}; bytes after the last newline are a torn or
 * in-flight record and never count. The end of the log is found by reading
 * backwards from the file's size to the last newline, a capped batch by
 * reading forwards from its start only. Every byte read is counted in
 * {@link #bytesRead()}: what the source reports as {@code bytesScanned}.
 */
public final class RecordScan {
    private final int forwardChunk;
    private final int backwardFirstChunk;
    private final int backwardMaxChunk;
    private long bytesRead;

    public RecordScan() {
        this(1 << 20, 4096, 1 << 20);
    }

    /** Chunk sizes in bytes (tests use a few bytes, so records straddle chunks). */
    public RecordScan(int forwardChunk, int backwardFirstChunk, int backwardMaxChunk) {
        this.forwardChunk = forwardChunk;
        this.backwardFirstChunk = backwardFirstChunk;
        this.backwardMaxChunk = backwardMaxChunk;
    }

    public long bytesRead() {
        return bytesRead;
    }

    /** The offset after the last newline in {@code [floor, size)}, or {@code floor} if there is none. */
    long lastRecordEnd(FileChannel channel, long floor, long size) throws IOException {
        long position = size;
        int chunk = backwardFirstChunk;
        while (position > floor) {
            long begin = Math.max(floor, position - chunk);
            ByteBuffer data = read(channel, begin, (int) (position - begin));
            for (int i = data.limit() - 1; i >= 0; i--) {
                if (data.get(i) == '\n') {
                    return begin + i + 1;
                }
            }
            position = begin;
            chunk = Math.min(chunk * 2, backwardMaxChunk);
        }
        return floor;
    }

    /** Where a scan forwards stopped, and how many records it passed. */
    public record Scanned(long end, long records) { }

    /**
     * The offset after the {@code maxRecords}-th record from {@code start}, or
     * {@code limit} if fewer lie before it, with the records passed. Only bytes
     * of {@code [start, limit)} are read, up to the capped record.
     */
    Scanned recordsEnd(FileChannel channel, long start, long maxRecords, long limit) throws IOException {
        long position = start;
        long found = 0;
        while (position < limit && found < maxRecords) {
            ByteBuffer data = read(channel, position, (int) Math.min(forwardChunk, limit - position));
            for (int i = 0; i < data.limit(); i++) {
                if (data.get(i) == '\n' && ++found == maxRecords) {
                    return new Scanned(position + i + 1, found);
                }
            }
            position += data.limit();
        }
        return new Scanned(position, found);
    }

    private ByteBuffer read(FileChannel channel, long position, int length) throws IOException {
        ByteBuffer buffer = ByteBuffer.allocate(length);
        while (buffer.hasRemaining()) {
            int n = channel.read(buffer, position + buffer.position());
            if (n < 0) {
                throw new IOException("no bytes at offset " + (position + buffer.position())
                        + " before the committed end (was the log truncated?)");
            }
            bytesRead += n;
        }
        return buffer.flip();
    }
}
