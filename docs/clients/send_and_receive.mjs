// djqueue's HTTP API from Node.js 18+ (fetch is built in): send COUNT messages in
// batches, then receive them with a long poll and ack each batch by its receipts.
//
//   DJQUEUE_URL=http://127.0.0.1:8001/queue-api/ DJQUEUE_TOKEN=djq_... \
//     node send_and_receive.mjs orders 1000
const base = process.env.DJQUEUE_URL ?? "http://127.0.0.1:8001/queue-api/";
const token = process.env.DJQUEUE_TOKEN;
const [queue = "orders", count = "1000"] = process.argv.slice(2);
const total = Number(count);

async function call(path, body) {
  const response = await fetch(new URL(path, base), {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) {
    // A problem document (RFC 9457): its type names the djqueue error.
    throw new Error(`${response.status} ${data.type}: ${data.detail}`);
  }
  return data;
}

let sent = 0;
while (sent < total) {
  const batch = [];
  for (let i = sent; i < Math.min(total, sent + 100); i++) {
    batch.push({ payload: { n: i, from: "node" } });
  }
  const { ids } = await call(`queues/${queue}/messages`, { messages: batch });
  sent += ids.length;
}

const seen = new Set();
let duplicates = 0;
while (seen.size < total) {
  const { messages } = await call(`queues/${queue}/receive`, {
    max_messages: 100, wait: 5, visibility_timeout: 60,
  });
  if (messages.length === 0) break; // nothing within 5 s
  for (const message of messages) {
    if (seen.has(message.payload.n)) duplicates++;
    seen.add(message.payload.n);
  }
  await call(`queues/${queue}/ack`, { receipts: messages.map((m) => m.receipt) });
}
console.log(JSON.stringify({ sent, received: seen.size, duplicates }));
