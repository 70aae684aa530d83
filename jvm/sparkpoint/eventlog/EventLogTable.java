package sparkpoint.eventlog;

import java.util.Set;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** One event log as a streaming table of its records, with the schema the reader gave. */
final class EventLogTable implements Table, SupportsRead {
    private final StructType schema;

    EventLogTable(StructType schema) {
        this.schema = schema;
    }

    @Override
    public String name() {
        return "sparkpoint_log";
    }

    @Override
    public Column[] columns() {
        Column[] columns = new Column[schema.fields().length];
        for (int i = 0; i < columns.length; i++) {
            StructField field = schema.fields()[i];
            columns[i] = Column.create(field.name(), field.dataType(), field.nullable());
        }
        return columns;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return Set.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new EventLogScan(schema, options);
    }
}
