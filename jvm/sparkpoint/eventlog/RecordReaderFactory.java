package sparkpoint.eventlog;

import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.json.JSONOptions;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Sent to the tasks: a {@link RecordReader} per {@link LogPartition}, parsing
 * into {@code schema} (the columns the query reads) with the session's time
 * zone and corrupt-record column name, fixed when the batch is planned.
 */
final class RecordReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    private final StructType schema;
    private final String timeZone;
    private final String corruptRecordColumn;

    RecordReaderFactory(StructType schema, String timeZone, String corruptRecordColumn) {
        this.schema = schema;
        this.timeZone = timeZone;
        this.corruptRecordColumn = corruptRecordColumn;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        JSONOptions options = new JSONOptions(
                scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(Map.of("mode", "FAILFAST"))),
                timeZone, corruptRecordColumn);
        return new RecordReader((LogPartition) partition, schema, options);
    }
}
