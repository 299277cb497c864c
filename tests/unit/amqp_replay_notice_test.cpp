#include <doctest/doctest.h>

#include "supervisor/broker/amqp_replay_notice.h"

using namespace pillbox::broker;

namespace {

const std::string kAttempt = "0123456789abcdef0123456789abcdef";

AmqpMessage notice_message(const std::string& body, const AmqpValue& header = AmqpValue("ok")) {
  AmqpMessage m;
  m.body = body;
  m.headers = {{std::string(kReplayOutcomeHeader), header}};
  return m;
}

}  // namespace

TEST_CASE("a replayed message's tag is read only as the replay writes it") {
  AmqpTable headers = {{"key", std::string("order-7")}};
  add_replay_tag(headers, ReplayTag{kAttempt, "42"});
  const auto tag = replay_tag(headers);
  REQUIRE(tag);
  CHECK(tag->attempt == kAttempt);
  CHECK(tag->record == "42");

  SUBCASE("a header given twice is no tag (which one would count?)") {
    headers.push_back({std::string(kReplayOfHeader), std::string("43")});
    CHECK_FALSE(replay_tag(headers));
  }
  SUBCASE("an attempt that is not 32 lowercase hex digits") {
    for (const std::string& bad : {kAttempt.substr(1), kAttempt + "0", std::string(32, 'A'), std::string(32, 'g')}) {
      AmqpTable h = {{std::string(kReplayHeader), bad}, {std::string(kReplayOfHeader), std::string("1")}};
      CHECK_FALSE(replay_tag(h));
    }
  }
  SUBCASE("a record that is no canonical offset") {
    for (const char* bad : {"", "007", "-1", "1e3", "12345678901234567890", "4 2"}) {
      AmqpTable h = {{std::string(kReplayHeader), kAttempt}, {std::string(kReplayOfHeader), std::string(bad)}};
      CHECK_FALSE(replay_tag(h));
    }
    AmqpTable zero = {{std::string(kReplayHeader), kAttempt}, {std::string(kReplayOfHeader), std::string("0")}};
    CHECK(replay_tag(zero));
  }
  SUBCASE("of another type") {
    AmqpTable h = {{std::string(kReplayHeader), kAttempt}, {std::string(kReplayOfHeader), AmqpValue(std::int64_t{42})}};
    CHECK_FALSE(replay_tag(h));
  }
  CHECK(is_replay_tag_header("pillbox-replay"));
  CHECK(is_replay_tag_header("pillbox-replay-of"));
  CHECK_FALSE(is_replay_tag_header("pillbox-replay-outcome"));
}

TEST_CASE("a worker's notice of a replayed message that ran ok reads back as it was written") {
  const ReplayNotice n{{kAttempt, "7"}, "host-1:42", "order-7", "", std::string(64, 'a')};
  const std::string body = replay_notice_json(n);  // the message's body views it
  AmqpOutgoing out = replay_notice_message(body);
  AmqpMessage m;
  m.body = std::string(out.body);
  m.headers = out.headers;
  CHECK(is_replay_notice(m));
  const auto back = read_replay_notice(m);
  REQUIRE(back);
  CHECK(back->tag.attempt == kAttempt);
  CHECK(back->tag.record == "7");
  CHECK(back->worker == "host-1:42");
  CHECK(back->message_id == "order-7");
  CHECK(back->payload_sha256 == std::string(64, 'a'));

  SUBCASE("not what a reader takes as a notice") {
    CHECK_FALSE(read_replay_notice(notice_message("not json")));
    CHECK_FALSE(read_replay_notice(notice_message("[]")));
    CHECK_FALSE(read_replay_notice(notice_message(R"({"replay":")" + kAttempt + R"(","record":"007"})")));
    CHECK_FALSE(read_replay_notice(notice_message(R"({"replay":")" + kAttempt + R"(","record":7})")));
    CHECK_FALSE(read_replay_notice(notice_message(R"({"replay":")" + kAttempt + R"(","record":"7","worker":[]})")));
    CHECK_FALSE(read_replay_notice(notice_message(R"({"replay":")" + kAttempt + R"(","record":"7","worker":")" +
                                                  std::string(5000, 'w') + "\"}")));
    CHECK_FALSE(read_replay_notice(notice_message(std::string(m.body), AmqpValue("failed"))));
    AmqpMessage omitted = m;
    omitted.body_omitted = true;
    CHECK_FALSE(read_replay_notice(omitted));
    // Meant as one all the same: the state log's reader leaves it out uncounted.
    CHECK(is_replay_notice(notice_message("not json")));
  }
  SUBCASE("a state message is no notice") {
    AmqpMessage state;
    state.body = R"({"record":"7","version":1,"state":"{}"})";
    CHECK_FALSE(is_replay_notice(state));
    CHECK_FALSE(read_replay_notice(state));
  }
}
