package sparkpoint.eventlog;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;

/**
 * The event log as one query's micro-batch stream, over the partitions this
 * worker owns (partition {@code p} belongs to worker {@code p % workerCount}).
 *
 * <p>Spark keeps the stream for the query's life, in the driver, and asks it
 * for the latest offsets on every trigger: each partition's end is kept
 * ({@link PartitionEnd}), so a trigger with nothing new costs a {@code stat}
 * per partition, whatever the size of the log. The bytes read to find ends
 * and caps are reported in the query's progress as {@code bytesScanned}.
 */
public final class EventLogStream implements MicroBatchStream, SupportsAdmissionControl, ReportsSourceMetrics {
    /**
     * A batch smaller than this (a live stream's) is read by one task: every
     * task costs Spark a fixed price (a Parquet file per sink, a copy of the
     * Hadoop configuration); a larger one by a task per partition, in parallel.
     */
    public static final long SPLIT_BYTES = 1024 * 1024;

    private final long maxRecordsPerBatch;
    private final RecordReaderFactory readers;
    private final RecordScan scan = new RecordScan();
    private final SortedMap<Integer, PartitionEnd> ends = new TreeMap<>();

    /**
     * {@code maxRecordsPerBatch}: the per-batch cap, shared by the partitions
     * (0: none; see {@link #fillCap}); {@code schema}: the columns the query reads. Made where the
     * query is planned: the session's time zone is the parser's.
     */
    public EventLogStream(String directory, int workerIndex, int workerCount, long maxRecordsPerBatch,
                          StructType schema) {
        this.maxRecordsPerBatch = maxRecordsPerBatch;
        SQLConf conf = SQLConf.get();
        this.readers = new RecordReaderFactory(schema, conf.sessionLocalTimeZone(), conf.columnNameOfCorruptRecord());
        Path log = Path.of(directory);
        int partitions = partitions(log.resolve("log.json"));
        for (int p = 0; p < partitions; p++) {
            if (p % workerCount == workerIndex) {
                ends.put(p, new PartitionEnd(log.resolve(String.format("p-%04d.jsonl", p)).toString(), scan));
            }
        }
    }

    private static int partitions(Path meta) {
        JsonNode header;
        try {
            header = new ObjectMapper().readTree(meta.toFile());
        } catch (NoSuchFileException | FileNotFoundException e) {
            throw new IllegalStateException(meta + ": no such event log (is the producer running?)");
        } catch (IOException e) {
            throw new IllegalStateException(meta + ": not a valid event log header");
        }
        JsonNode count = header == null ? null : header.get("partitions");
        if (count == null || !count.isInt() || count.asInt() < 1) {
            throw new IllegalStateException(meta + ": invalid partition count " + count);
        }
        return count.asInt();
    }

    /** A position in one of the worker's partitions, found by reading it. */
    private interface Position {
        long in(int partition, PartitionEnd end) throws IOException;
    }

    /** An offset over every partition the worker owns, each at {@code position}. */
    private LogOffset offset(Position position) {
        SortedMap<Integer, Long> positions = new TreeMap<>();
        try {
            for (Map.Entry<Integer, PartitionEnd> end : ends.entrySet()) {
                positions.put(end.getKey(), position.in(end.getKey(), end.getValue()));
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return new LogOffset(positions);
    }

    @Override
    public Offset initialOffset() {
        return offset((partition, end) -> 0L);
    }

    @Override
    public Offset deserializeOffset(String json) {
        return LogOffset.parse(json);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return maxRecordsPerBatch > 0 ? ReadLimit.maxRows(maxRecordsPerBatch) : ReadLimit.allAvailable();
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("the event log stream is asked with a read limit");
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
        LogOffset from = (LogOffset) start;
        if (limit instanceof ReadMaxRows max && max.maxRows() > 0) {
            return fillCap(from, max.maxRows());
        }
        return offset((partition, end) -> end.batchEnd(from.position(partition), 0).end());
    }

    /**
     * {@code start} moved forward by up to {@code cap} records in all:
     * each round gives every partition that still has records an equal share
     * of what is left of the cap (at least one), until the cap is used or
     * every partition is exhausted. A partition with few new records leaves
     * its share to the others, so a batch catching up holds the whole cap.
     */
    private LogOffset fillCap(LogOffset start, long cap) {
        SortedMap<Integer, Long> positions = new TreeMap<>();
        ends.keySet().forEach(partition -> positions.put(partition, start.position(partition)));
        List<Integer> open = new ArrayList<>(ends.keySet());
        long remaining = cap;
        try {
            while (remaining > 0 && !open.isEmpty()) {
                long share = Math.max(1, remaining / open.size());
                for (Iterator<Integer> partitions = open.iterator(); partitions.hasNext() && remaining > 0; ) {
                    int partition = partitions.next();
                    long asked = Math.min(share, remaining);
                    RecordScan.Scanned scanned = ends.get(partition).batchEnd(positions.get(partition), asked);
                    positions.put(partition, scanned.end());
                    remaining -= scanned.records();
                    if (scanned.records() < asked) {
                        partitions.remove();            // nothing more in it for now
                    }
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return new LogOffset(positions);
    }

    @Override
    public Offset reportLatestOffset() {
        return offset((partition, end) -> end.end());
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        LogOffset from = (LogOffset) start;
        LogOffset to = (LogOffset) end;
        List<LogPartition.ByteRange> ranges = new ArrayList<>();
        long bytes = 0;
        for (Map.Entry<Integer, PartitionEnd> partition : ends.entrySet()) {
            long begin = from.position(partition.getKey());
            long stop = to.position(partition.getKey());
            if (stop > begin) {
                ranges.add(new LogPartition.ByteRange(partition.getValue().path().toString(), begin, stop));
                bytes += stop - begin;
            }
        }
        if (ranges.isEmpty()) {
            return new InputPartition[0];
        }
        if (bytes < SPLIT_BYTES) {
            return new InputPartition[] {new LogPartition(ranges)};
        }
        return ranges.stream().map(range -> new LogPartition(List.of(range))).toArray(InputPartition[]::new);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return readers;
    }

    @Override
    public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
        return Map.of("bytesScanned", Long.toString(bytesScanned()));
    }

    /** The bytes read so far to find partitions' ends and capped batches' ends. */
    public long bytesScanned() {
        return scan.bytesRead();
    }

    @Override
    public void commit(Offset end) {
    }

    @Override
    public void stop() {
    }
}
