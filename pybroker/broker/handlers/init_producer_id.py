"""InitProducerId (key 22): producer ids and epochs for idempotent producers.

Without a transactional id every call gets a fresh producer id at epoch 0 (what Kafka does
for idempotent producers, also when they pass their old id after an error, KIP-360). A
transactional id keeps its producer id and gets the next epoch, fencing older instances.
"""

from __future__ import annotations

from pybroker.broker.handlers import handler
from pybroker.broker.request import RequestContext
from pybroker.errors import ErrorCode
from pybroker.net.protocol.typed import InitProducerIdRequest, InitProducerIdResponse


@handler(api_key=22, versions=(0, 5))
async def init_producer_id(ctx: RequestContext,
                           request: InitProducerIdRequest) -> InitProducerIdResponse:
    pid, epoch = await ctx.broker.producer_ids.init_producer_async(
        request.get("transactional_id"))
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": pid,
            "producer_epoch": epoch}
