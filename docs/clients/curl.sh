#!/usr/bin/env bash
# djqueue's HTTP API with curl (and jq to read the replies): send a message, receive
# it with a long poll, ack it by its receipt.
#
#   DJQUEUE_URL=http://127.0.0.1:8001/queue-api/ DJQUEUE_TOKEN=djq_... ./curl.sh orders
set -euo pipefail
base=${DJQUEUE_URL:-http://127.0.0.1:8001/queue-api/}
queue=${1:-orders}
api() {  # api PATH JSON: POST it; fail (and print the problem document) on an error
  curl --silent --show-error --fail-with-body -X POST "$base$1" \
    -H "Authorization: Bearer $DJQUEUE_TOKEN" -H "Content-Type: application/json" -d "$2"
}

api "queues/$queue/messages" '{"payload": {"order": 42}, "priority": 5}' | jq -c .
reply=$(api "queues/$queue/receive" '{"max_messages": 1, "wait": 5}')
echo "$reply" | jq -c '.messages[] | {id, payload}'
receipt=$(echo "$reply" | jq -r '.messages[0].receipt')
api "queues/$queue/ack" "{\"receipts\": [\"$receipt\"]}" | jq -c .
