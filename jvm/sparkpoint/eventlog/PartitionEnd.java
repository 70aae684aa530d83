package sparkpoint.eventlog;

import java.io.IOException;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.Objects;

/**
 * A partition's committed end, kept across triggers.
 *
 * <p>When the file's size has not changed, asking costs one {@code stat}; when
 * it grew, only the appended bytes are scanned (backwards from the new size,
 * down to the end known before). A file that shrank or was replaced by
 * another is scanned afresh, from its tail.
 */
public final class PartitionEnd {
    private final Path path;
    private final RecordScan scan;
    private Object identity;
    private long size;
    private long end;

    public PartitionEnd(String path, RecordScan scan) {
        this.path = Path.of(path);
        this.scan = scan;
    }

    Path path() {
        return path;
    }

    /** The offset after the last complete record (0 while the file does not exist). */
    public long end() throws IOException {
        BasicFileAttributes attributes;
        try {
            attributes = Files.readAttributes(path, BasicFileAttributes.class);
        } catch (NoSuchFileException e) {
            forget(null);
            return 0;
        }
        Object key = attributes.fileKey();
        if (!Objects.equals(key, identity) || attributes.size() < size) {
            forget(key);
        }
        if (attributes.size() != size) {
            try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
                end = scan.lastRecordEnd(channel, end, attributes.size());
            }
            size = attributes.size();
        }
        return end;
    }

    /**
     * Where a batch from {@code start} ends, and the records it holds: the
     * committed end, or after {@code maxRecords} records if that comes first
     * (none: {@code maxRecords <= 0}, and the records are not counted). Never
     * before {@code start}; reads only from {@code start} on.
     */
    public RecordScan.Scanned batchEnd(long start, long maxRecords) throws IOException {
        long committed = end();
        if (committed <= start) {
            return new RecordScan.Scanned(start, 0);
        }
        if (maxRecords <= 0) {
            return new RecordScan.Scanned(committed, -1);
        }
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
            return scan.recordsEnd(channel, start, maxRecords, committed);
        }
    }

    private void forget(Object key) {
        identity = key;
        size = 0;
        end = 0;
    }
}
