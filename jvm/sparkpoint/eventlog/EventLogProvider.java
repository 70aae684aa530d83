package sparkpoint.eventlog;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The event log as a Spark streaming source: {@code spark.readStream.format(
 * "sparkpoint.eventlog.EventLogProvider").schema(...)}; the records are JSON
 * objects, read into the schema given.
 */
public final class EventLogProvider implements TableProvider {
    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        throw new IllegalArgumentException("the event log source needs an explicit schema");
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new EventLogTable(schema);
    }
}
