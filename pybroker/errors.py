"""Kafka error codes and the exceptions that carry them.

Bad input raises a subclass of :class:`KafkaError`; its ``code`` is the Kafka error code the
request handler puts in the response (STYLE 12). Bugs in pybroker itself are any other
exception: the server logs them and answers UNKNOWN_SERVER_ERROR, never a wrong code.

The numbers are Kafka's wire protocol constants (``org.apache.kafka.common.protocol.Errors``).
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INVALID_UPDATE_VERSION = 95
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    TRANSACTION_ABORTABLE = 120

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED, ErrorCode.UNSTABLE_OFFSET_COMMIT,
})


class KafkaError(Exception):
    """Bad input or a refused request; ``code`` goes into the response."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = ErrorCode(code)


def _error(name: str, code: ErrorCode) -> type[KafkaError]:
    return type(name, (KafkaError,), {"code": code, "__doc__": f"Maps to {code.name}."})


CorruptRecordError = _error("CorruptRecordError", ErrorCode.CORRUPT_MESSAGE)
InvalidRecordError = _error("InvalidRecordError", ErrorCode.INVALID_RECORD)


class RecordValidationError(KafkaError):
    """Records of an intact batch that break a rule of their topic (Kafka's
    RecordValidationException, KIP-467): INVALID_RECORD, with ``record_errors`` pairing
    each such record's index in its batch with why, and Kafka's summary as the message."""

    code = ErrorCode.INVALID_RECORD

    def __init__(self, record_errors: list[tuple[int, str]]) -> None:
        shown = ", ".join(f"RecordError(batchIndex={index}, message='{why}')"
                          for index, why in record_errors[:3])
        super().__init__(f"One or more records have been rejected due to "
                         f"{len(record_errors)} record errors in total, and only showing "
                         f"the first three errors at most: [{shown}]")
        self.record_errors = record_errors


UnsupportedCompressionError = _error("UnsupportedCompressionError",
                                     ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
InvalidTimestampError = _error("InvalidTimestampError", ErrorCode.INVALID_TIMESTAMP)
MessageTooLargeError = _error("MessageTooLargeError", ErrorCode.MESSAGE_TOO_LARGE)
RecordListTooLargeError = _error("RecordListTooLargeError", ErrorCode.RECORD_LIST_TOO_LARGE)
OffsetOutOfRangeError = _error("OffsetOutOfRangeError", ErrorCode.OFFSET_OUT_OF_RANGE)
UnknownTopicOrPartitionError = _error("UnknownTopicOrPartitionError",
                                      ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
InvalidTopicError = _error("InvalidTopicError", ErrorCode.INVALID_TOPIC_EXCEPTION)
TopicAlreadyExistsError = _error("TopicAlreadyExistsError", ErrorCode.TOPIC_ALREADY_EXISTS)
InvalidPartitionsError = _error("InvalidPartitionsError", ErrorCode.INVALID_PARTITIONS)
InvalidReplicationFactorError = _error("InvalidReplicationFactorError",
                                       ErrorCode.INVALID_REPLICATION_FACTOR)
InvalidConfigError = _error("InvalidConfigError", ErrorCode.INVALID_CONFIG)
InvalidRequestError = _error("InvalidRequestError", ErrorCode.INVALID_REQUEST)
TopicDeletionDisabledError = _error("TopicDeletionDisabledError",
                                    ErrorCode.TOPIC_DELETION_DISABLED)
InvalidReplicaAssignmentError = _error("InvalidReplicaAssignmentError",
                                       ErrorCode.INVALID_REPLICA_ASSIGNMENT)
NoReassignmentInProgressError = _error("NoReassignmentInProgressError",
                                       ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
UnknownTopicIdError = _error("UnknownTopicIdError", ErrorCode.UNKNOWN_TOPIC_ID)
UnsupportedVersionError = _error("UnsupportedVersionError", ErrorCode.UNSUPPORTED_VERSION)
OutOfOrderSequenceError = _error("OutOfOrderSequenceError", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
DuplicateSequenceError = _error("DuplicateSequenceError", ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
InvalidProducerEpochError = _error("InvalidProducerEpochError", ErrorCode.INVALID_PRODUCER_EPOCH)
UnknownProducerIdError = _error("UnknownProducerIdError", ErrorCode.UNKNOWN_PRODUCER_ID)
TransactionCoordinatorFencedError = _error("TransactionCoordinatorFencedError",
                                           ErrorCode.TRANSACTION_COORDINATOR_FENCED)
NotEnoughReplicasError = _error("NotEnoughReplicasError", ErrorCode.NOT_ENOUGH_REPLICAS)
NotLeaderOrFollowerError = _error("NotLeaderOrFollowerError", ErrorCode.NOT_LEADER_OR_FOLLOWER)
CoordinatorNotAvailableError = _error("CoordinatorNotAvailableError",
                                      ErrorCode.COORDINATOR_NOT_AVAILABLE)
KafkaStorageError = _error("KafkaStorageError", ErrorCode.KAFKA_STORAGE_ERROR)
FencedLeaderEpochError = _error("FencedLeaderEpochError", ErrorCode.FENCED_LEADER_EPOCH)
UnknownLeaderEpochError = _error("UnknownLeaderEpochError", ErrorCode.UNKNOWN_LEADER_EPOCH)
ThrottlingQuotaExceededError = _error("ThrottlingQuotaExceededError",
                                      ErrorCode.THROTTLING_QUOTA_EXCEEDED)
