#pragma once
// `pillbox quarantine replay --amqp URL --queue NAME`: the fleet's replay
// (fleet_redrive.h) on RabbitMQ (docs/distributed.md, RabbitMQ: replay).
//
//   lock     NAME.dlq.lock.ID, a queue exclusive to the replay's
//            connection: RabbitMQ refuses it to every other connection
//            (RESOURCE_LOCKED) and deletes it when the replay's connection
//            ends, however it ends. A replay killed leaves no lock; one
//            stopped (SIGSTOP) holds its records until it goes on or dies.
//   claim    the record's state (NAME.dlq.state, a compare and set) names
//            the redrive: waiting_entry is its attempt id, written before
//            the message is published, so a replay that dies in between
//            leaves the record waiting, never published twice.
//   redrive  the dead letter republished to NAME, confirmed: its payload,
//            message_id, correlation_id, reply_to and own headers (the
//            business key among them), and the tag (amqp_replay_notice.h).
//   outcome  a worker's notice in NAME.dlq.state (ok), or a dead letter in
//            NAME.dlq carrying the tag (failed again: a worker's, or the
//            broker's past x-delivery-limit), read by offset from where
//            they stood when the replay began; either only of the payload
//            the redrive republished (a notice names the sha256 of the one
//            its worker ran): a tag read off NAME and put on another
//            payload is no outcome of the redrive.
//
// A record whose earlier redrive has no outcome yet (still in NAME, held by
// a worker, or lost: NAME purged) is not redriven again; --force
// republishes it, for the operator who knows it is gone.
#include <memory>
#include <string>

#include "supervisor/broker/amqp_quarantine.h"
#include "supervisor/broker/amqp_replay_notice.h"
#include "supervisor/broker/fleet_redrive.h"

namespace pillbox::broker {

// RabbitMQ's part of a replay by `run` (which outlives it).
std::unique_ptr<RedriveRoute> amqp_redrive_route(AmqpQuarantine& quarantine, const ReplayRun& run);

// The message that redrives the dead letter `dead_letter` (as read from
// NAME.dlq) with `tag`: its body (viewed: keep the dead letter until it is
// sent), message_id and correlation_id, the original's reply_to (from
// pillbox-original, when it is a name that can be sent), and its headers
// but the broker's (x-*), pillbox's own (pillbox-*: a record, a history,
// an earlier tag) and CC/BCC (they would route it to other queues too).
AmqpOutgoing redrive_message(const AmqpMessage& dead_letter, const ReplayTag& tag);

}  // namespace pillbox::broker
