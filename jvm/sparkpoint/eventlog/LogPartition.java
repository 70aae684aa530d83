package sparkpoint.eventlog;

import java.io.Serializable;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** What one task reads: byte ranges of partition files, each from one record boundary to another. */
record LogPartition(List<ByteRange> ranges) implements InputPartition {

    /** {@code [begin, stop)} of the file at {@code path}. */
    record ByteRange(String path, long begin, long stop) implements Serializable {
        long length() {
            return stop - begin;
        }
    }
}
