package sparkpoint.eventlog;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Collections;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A position in the log: {@code {"<partition>": byte_offset}} over the
 * partitions a worker owns, each at a record boundary. Spark records each
 * batch's end offsets in its checkpoint before running the batch, so a
 * restarted query re-reads exactly the same byte ranges.
 */
public final class LogOffset extends Offset {
    private static final ObjectMapper JSON = new ObjectMapper();

    private final SortedMap<Integer, Long> positions;

    LogOffset(SortedMap<Integer, Long> positions) {
        this.positions = Collections.unmodifiableSortedMap(new TreeMap<>(positions));
    }

    static LogOffset parse(String json) {
        Map<String, Long> parsed;
        try {
            parsed = JSON.readValue(json, new TypeReference<Map<String, Long>>() { });
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("not an event log offset: " + json, e);
        }
        SortedMap<Integer, Long> positions = new TreeMap<>();
        try {
            for (Map.Entry<String, Long> entry : parsed.entrySet()) {
                int partition = Integer.parseInt(entry.getKey());
                if (partition < 0 || entry.getValue() == null || entry.getValue() < 0) {
                    throw new NumberFormatException();
                }
                positions.put(partition, entry.getValue());
            }
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("not an event log offset: " + json);
        }
        return new LogOffset(positions);
    }

    /** The byte position in {@code partition} (0 where the offset has none). */
    long position(int partition) {
        return positions.getOrDefault(partition, 0L);
    }

    @Override
    public String json() {
        StringBuilder json = new StringBuilder("{");
        for (Map.Entry<Integer, Long> entry : positions.entrySet()) {
            if (json.length() > 1) {
                json.append(',');
            }
            json.append('"').append(entry.getKey()).append("\":").append(entry.getValue());
        }
        return json.append('}').toString();
    }
}
