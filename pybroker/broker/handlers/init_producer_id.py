"""InitProducerId (key 22): producer ids and epochs for idempotent producers.

Without a transactional id every call gets a fresh producer id at epoch 0 (what Kafka does
for idempotent producers, also when they pass their old id after an error, KIP-360). A
transactional id keeps its producer id and gets the next epoch, fencing older instances;
its transaction timeout must be positive and at most ``transaction.max.timeout.ms``
(INVALID_TRANSACTION_TIMEOUT otherwise, as Kafka answers before touching any state).
"""

from __future__ import annotations

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import InitProducerIdRequest, InitProducerIdResponse


@handler(api_key=22, versions=(0, 5))
async def init_producer_id(ctx: RequestContext,
                           request: InitProducerIdRequest) -> InitProducerIdResponse:
    transactional_id = request.get("transactional_id")
    if transactional_id and not (
            0 < request["transaction_timeout_ms"]
            <= ctx.broker.config.get("transaction.max.timeout.ms")):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                "producer_id": -1, "producer_epoch": -1}
    pid, epoch = await ctx.broker.producer_ids.init_producer_async(transactional_id)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": pid,
            "producer_epoch": epoch}
