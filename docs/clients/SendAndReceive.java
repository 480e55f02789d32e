// djqueue's HTTP API from Java 11+ with the JDK's own HttpClient, no libraries: send
// COUNT messages in batches, then receive them with a long poll and ack each batch.
//
//   DJQUEUE_URL=http://127.0.0.1:8001/queue-api/ DJQUEUE_TOKEN=djq_... \
//     java SendAndReceive.java orders 1000
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

public class SendAndReceive {
    // HTTP/1.1: the JDK's default asks a cleartext server to upgrade to HTTP/2 (h2c),
    // which ASGI servers such as uvicorn do not speak.
    static final HttpClient HTTP = HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1).build();
    static String base;
    static String token;

    public static void main(String[] args) throws Exception {
        base = System.getenv().getOrDefault("DJQUEUE_URL", "http://127.0.0.1:8001/queue-api/");
        token = System.getenv("DJQUEUE_TOKEN");
        String queue = args.length > 0 ? args[0] : "orders";
        int total = args.length > 1 ? Integer.parseInt(args[1]) : 1000;

        int sent = 0;
        while (sent < total) {
            StringBuilder batch = new StringBuilder("{\"messages\":[");
            for (int i = sent; i < Math.min(total, sent + 100); i++) {
                if (i > sent) batch.append(',');
                batch.append("{\"payload\":{\"n\":").append(i).append(",\"from\":\"java\"}}");
            }
            Map<String, Object> reply = call("queues/" + queue + "/messages", batch + "]}");
            sent += ((List<?>) reply.get("ids")).size();
        }

        Set<Long> seen = new HashSet<>();
        int duplicates = 0;
        while (seen.size() < total) {
            Map<String, Object> reply = call("queues/" + queue + "/receive",
                    "{\"max_messages\":100,\"wait\":5,\"visibility_timeout\":60}");
            List<?> messages = (List<?>) reply.get("messages");
            if (messages.isEmpty()) break; // nothing within 5 s
            StringBuilder receipts = new StringBuilder("{\"receipts\":[");
            for (int i = 0; i < messages.size(); i++) {
                Map<?, ?> message = (Map<?, ?>) messages.get(i);
                long n = (Long) ((Map<?, ?>) message.get("payload")).get("n");
                if (!seen.add(n)) duplicates++;
                if (i > 0) receipts.append(',');
                receipts.append('"').append(message.get("receipt")).append('"');
            }
            call("queues/" + queue + "/ack", receipts + "]}");
        }
        System.out.printf("{\"sent\": %d, \"received\": %d, \"duplicates\": %d}%n",
                sent, seen.size(), duplicates);
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> call(String path, String body) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create(base).resolve(path))
                .header("Authorization", "Bearer " + token)
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body)).build();
        HttpResponse<String> response = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
        Map<String, Object> data = (Map<String, Object>) new Json(response.body()).value();
        if (response.statusCode() >= 400) {
            // A problem document (RFC 9457): its type names the djqueue error.
            throw new IllegalStateException(response.statusCode() + " " + data.get("type")
                    + ": " + data.get("detail"));
        }
        return data;
    }

    /** Just enough JSON for the API's replies: objects, arrays, strings, numbers. */
    static final class Json {
        private final String text;
        private int at;

        Json(String text) { this.text = text; }

        Object value() {
            skipSpace();
            char c = text.charAt(at);
            if (c == '{') return object();
            if (c == '[') return array();
            if (c == '"') return string();
            if (text.startsWith("true", at)) { at += 4; return Boolean.TRUE; }
            if (text.startsWith("false", at)) { at += 5; return Boolean.FALSE; }
            if (text.startsWith("null", at)) { at += 4; return null; }
            return number();
        }

        private Map<String, Object> object() {
            Map<String, Object> map = new LinkedHashMap<>();
            at++;
            skipSpace();
            if (text.charAt(at) == '}') { at++; return map; }
            while (true) {
                skipSpace();
                String key = string();
                skipSpace();
                at++; // ':'
                map.put(key, value());
                skipSpace();
                if (text.charAt(at++) == '}') return map;
            }
        }

        private List<Object> array() {
            List<Object> list = new ArrayList<>();
            at++;
            skipSpace();
            if (text.charAt(at) == ']') { at++; return list; }
            while (true) {
                list.add(value());
                skipSpace();
                if (text.charAt(at++) == ']') return list;
            }
        }

        private String string() {
            StringBuilder out = new StringBuilder();
            at++;
            while (true) {
                char c = text.charAt(at++);
                if (c == '"') return out.toString();
                if (c != '\\') { out.append(c); continue; }
                char e = text.charAt(at++);
                switch (e) {
                    case 'n' -> out.append('\n');
                    case 't' -> out.append('\t');
                    case 'r' -> out.append('\r');
                    case 'b' -> out.append('\b');
                    case 'f' -> out.append('\f');
                    case 'u' -> { out.append((char) Integer.parseInt(text.substring(at, at + 4), 16)); at += 4; }
                    default -> out.append(e);
                }
            }
        }

        private Object number() {
            int start = at;
            while (at < text.length() && "+-0123456789.eE".indexOf(text.charAt(at)) >= 0) at++;
            String digits = text.substring(start, at);
            return digits.matches("-?\\d+") ? (Object) Long.parseLong(digits) : Double.parseDouble(digits);
        }

        private void skipSpace() {
            while (at < text.length() && Character.isWhitespace(text.charAt(at))) at++;
        }
    }
}
