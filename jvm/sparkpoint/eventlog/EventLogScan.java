package sparkpoint.eventlog;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A query's scan of the log: only the columns it uses are parsed (Spark
 * prunes them here, as for its JSON file source). Options: {@code path} (the
 * log directory), {@code workerIndex}, {@code workerCount},
 * {@code maxRecordsPerBatch} (0 = no cap).
 */
final class EventLogScan implements SupportsPushDownRequiredColumns, Scan {
    private final CaseInsensitiveStringMap options;
    private StructType schema;

    EventLogScan(StructType schema, CaseInsensitiveStringMap options) {
        this.schema = schema;
        this.options = options;
    }

    @Override
    public void pruneColumns(StructType required) {
        schema = required;
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return schema;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        String path = options.get("path");
        if (path == null) {
            throw new IllegalArgumentException("the event log source needs the option path");
        }
        return new EventLogStream(path, options.getInt("workerIndex", 0), options.getInt("workerCount", 1),
                options.getLong("maxRecordsPerBatch", 0), schema);
    }
}
