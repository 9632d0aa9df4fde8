//! Search over every chat (docs/search.md, docs/http-api.md "Search") through the real binary:
//! turns are found right after they end, by English words, Chinese text and quoted phrases,
//! with marked snippets and the records' cursors; after a restart (the index file, 0600 in a
//! 0700 directory), with a chat dropped in by hand and with the index file damaged; never after
//! a delete or a rewind. Bad parameters are a 422 however they are spelt. The `search_history`
//! tool answers from the same index inside a turn of the fake model.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};

use crate::common::*;

fn turn(fake: &FakeLlm, ws: &mut WsClient, chat: &str, text: &str, answer: &str) {
    fake.push(Reply::text(&[answer]));
    ws.message(chat, text, "openai_compatible");
    let events = ws.turn_events(chat);
    assert_eq!(events.last().map(|e| e["event"].clone()), Some(json!("done")), "{events:#?}");
}

fn search(server: &TestServer, query: &str) -> Value {
    let r = server.get(&format!("/api/search?{query}"));
    assert_eq!(r.status, 200, "{query}: {}", r.body);
    r.json()
}

/// (chat, role, snippet) of every hit.
fn hits(v: &Value) -> Vec<(String, String, String)> {
    v["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["chat_id"].as_str().unwrap().to_string(),
                h["role"].as_str().unwrap().to_string(),
                h["snippet"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn chats_of(v: &Value) -> Vec<String> {
    let mut c: Vec<String> = hits(v).into_iter().map(|h| h.0).collect();
    c.dedup();
    c
}

#[test]
fn turns_are_found_after_restart_drop_in_damage_delete_and_rewind() {
    let OneChat { fake, mut server, mut ws, .. } = one_chat();
    let tea = ws.new_chat();
    turn(&fake, &mut ws, &tea, "Our favourite tea is Darjeeling, brewed for three minutes", "Noted: Darjeeling it is.");
    let trip = ws.new_chat();
    turn(&fake, &mut ws, &trip, "我们明天去北京看长城", "好的，祝你们玩得开心！");
    turn(&fake, &mut ws, &trip, "Remember the kayak rental on Friday", "Kayak booked.");

    // Right after the turns: both records of the tea chat, and its title (the first message's
    // start) as a hit of its own.
    let v = search(&server, "q=darjeeling");
    let h = hits(&v);
    assert_eq!(h.len(), 3, "{v}");
    assert_eq!(h.iter().filter(|x| x.1 == "title").count(), 1, "{v}");
    assert!(h.iter().all(|x| x.0 == tea && x.2.contains("«Darjeeling»")), "{v}");
    assert_eq!(v["next"], Value::Null);
    // The cursor is the record's own in history.jsonl; the timestamp its own too.
    let recs = history_records(&server.home, &tea);
    for hit in v["hits"].as_array().unwrap().iter().filter(|h| h["role"] != "title") {
        let rec = recs.iter().find(|r| r["cursor"] == hit["cursor"]).expect("a record with the hit's cursor");
        assert_eq!(rec["role"], hit["role"]);
        assert_eq!(rec["timestamp"], hit["timestamp"]);
        assert!(rec["content"].as_str().unwrap().contains("Darjeeling"));
    }
    // Chinese by any two characters of a run; the hit is marked.
    let v = search(&server, "q=%E5%8C%97%E4%BA%AC&role=user"); // 北京
    assert_eq!(hits(&v).len(), 1, "{v}");
    assert_eq!(hits(&v)[0].2, "我们明天去«北京»看长城");
    assert_eq!(chats_of(&search(&server, "q=%E9%95%BF%E5%9F%8E")), std::slice::from_ref(&trip)); // 长城
                                                                                                 // Phrases: in order only.
    assert_eq!(hits(&search(&server, "q=%22favourite%20tea%22&role=user,assistant")).len(), 1);
    assert!(hits(&search(&server, "q=%22tea%20favourite%22")).is_empty());
    // Stemming: "brewing" finds "brewed".
    assert_eq!(chats_of(&search(&server, "q=brewing")), std::slice::from_ref(&tea));
    // Filters: chat, role, dates.
    assert_eq!(hits(&search(&server, &format!("q=kayak&chat_id={tea}"))).len(), 0);
    // A record next to a match comes after it with part of its score (docs/search.md §4),
    // unmarked.
    let v = search(&server, &format!("q=kayak&chat_id={trip}&role=assistant"));
    let h = hits(&v);
    assert_eq!(h.iter().map(|h| h.1.as_str()).collect::<Vec<_>>(), ["assistant", "assistant"], "{v}");
    assert_eq!((h[0].2.as_str(), h[1].2.as_str()), ("«Kayak» booked.", "好的，祝你们玩得开心！"));
    assert_eq!(hits(&search(&server, "q=kayak&to=2000-01-01")).len(), 0);
    let marked = |v: &Value| hits(v).into_iter().filter(|h| h.2.contains('«')).count();
    assert_eq!(marked(&search(&server, "q=kayak&from=2000-01-01&to=2999-12-31")), 2);
    // Paging: one hit a page, `next` carries on, the pages together are the whole list.
    let all = hits(&search(&server, "q=kayak%20darjeeling"));
    assert!(all.len() >= 5, "{all:?}");
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let v = search(&server, &format!("q=kayak%20darjeeling&limit=1&after={after}"));
        paged.extend(hits(&v));
        match v["next"].as_u64() {
            Some(n) => after = n,
            None => break,
        }
    }
    assert_eq!(paged, all);

    // Restart: the index file is read back (0600 in 0700), the same hits come out.
    let before = search(&server, "q=darjeeling");
    server.restart();
    let file = server.memory().join(".search/index.bin");
    assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(fs::metadata(file.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(search(&server, "q=darjeeling")["hits"], before["hits"]);
    assert!(server.log_text().contains("event=search.ready index=loaded"), "{}", server.log_text());

    // A chat dropped in while the server was down, from an install that never had an index.
    let dropped = server.memory().join("dropped_chat");
    fs::create_dir_all(&dropped).unwrap();
    fs::write(
        dropped.join("history.jsonl"),
        "{\"cursor\":1,\"timestamp\":\"2023-05-01 10:00\",\"role\":\"user\",\"content\":\"my xylophone lessons start in June\"}\n",
    )
    .unwrap();
    server.restart();
    let v = search(&server, "q=xylophone");
    assert_eq!(chats_of(&v), ["dropped_chat"]);
    assert_eq!(v["hits"][0]["timestamp"], "2023-05-01 10:00");
    assert_eq!(v["hits"][0]["cursor"], 1);

    // One dropped in while the server runs: the memory root's change is noticed by the next query.
    let live = server.memory().join("live_drop");
    fs::create_dir_all(&live).unwrap();
    fs::write(
        live.join("history.jsonl"),
        "{\"cursor\":7,\"timestamp\":\"2023-05-02 10:00\",\"role\":\"assistant\",\"content\":\"the marimba arrives Tuesday\"}\n",
    )
    .unwrap();
    let v = search(&server, "q=marimba");
    assert_eq!(chats_of(&v), ["live_drop"]);
    assert_eq!(v["hits"][0]["cursor"], 7);

    // A damaged index file is rebuilt from the histories.
    let file = server.memory().join(".search/index.bin");
    let mut bytes = fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0x55;
    fs::write(&file, &bytes).unwrap();
    server.restart();
    assert_eq!(chats_of(&search(&server, "q=xylophone")), ["dropped_chat"]);
    assert_eq!(search(&server, "q=darjeeling")["hits"], before["hits"]);
    assert!(server.log_text().contains("event=search.ready index=damaged"), "{}", server.log_text());

    // Delete: the chat leaves the results at once, and after a restart.
    let mut ws = WsClient::connect(&server);
    assert_eq!(server.request("DELETE", &format!("/api/sessions/{trip}"), &[], None).status, 204);
    assert!(hits(&search(&server, "q=kayak")).is_empty());
    assert!(hits(&search(&server, "q=%E5%8C%97%E4%BA%AC")).is_empty());

    // Rewind: the rewound messages leave the results; the undo brings them back.
    turn(&fake, &mut ws, &tea, "Also: oolong on Sundays", "Oolong on Sundays, noted.");
    assert_eq!(marked(&search(&server, "q=oolong")), 2);
    let r = server.post(&format!("/api/sessions/{tea}/rewind"), &json!({"before_message": 2, "chat": true}));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = search(&server, "q=oolong");
    assert!(hits(&v).is_empty(), "{v} {}", r.body);
    assert_eq!(marked(&search(&server, "q=darjeeling")), 3);
    let r = server.post(&format!("/api/sessions/{tea}/rewind/undo"), &json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(marked(&search(&server, "q=oolong")), 2);
    server.restart();
    assert!(hits(&search(&server, "q=kayak")).is_empty());
    assert_eq!(marked(&search(&server, "q=oolong")), 2);
}

#[test]
fn bad_parameters_are_a_422_however_spelt() {
    let server = TestServer::start();
    let detail = |query: &str| -> Vec<(Value, String)> {
        let r = server.get(&format!("/api/search{query}"));
        assert_eq!(r.status, 422, "{query}: {}", r.body);
        r.json()["detail"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["loc"].clone(), d["type"].as_str().unwrap().to_string()))
            .collect()
    };
    let one = |query: &str, loc: Value, kind: &str| assert_eq!(detail(query), [(loc, kind.to_string())], "{query}");
    one("", json!(["query", "q"]), "missing");
    one("?q=", json!(["query", "q"]), "string_too_short");
    one("?q=%20%20", json!(["query", "q"]), "string_too_short");
    one(&format!("?q={}", "a".repeat(1001)), json!(["query", "q"]), "string_too_long");
    one("?q=x&limit=0", json!(["query", "limit"]), "greater_than_equal");
    one("?q=x&limit=101", json!(["query", "limit"]), "less_than_equal");
    one("?q=x&limit=ten", json!(["query", "limit"]), "int_parsing");
    one("?q=x&limit=1.5", json!(["query", "limit"]), "int_parsing");
    one("?q=x&after=-1", json!(["query", "after"]), "greater_than_equal");
    one("?q=x&after=1001", json!(["query", "after"]), "less_than_equal");
    one("?q=x&role=system", json!(["query", "role"]), "literal_error");
    one("?q=x&role=user,bot", json!(["query", "role"]), "literal_error");
    one("?q=x&from=yesterday", json!(["query", "from"]), "datetime_from_date_parsing");
    one("?q=x&to=2024-13-01", json!(["query", "to"]), "datetime_from_date_parsing");
    one("?q=x&chat_id=..%2Fetc", json!(["query", "chat_id"]), "string_pattern_mismatch");
    one("?q=x&chat_id=a%20b", json!(["query", "chat_id"]), "string_pattern_mismatch");
    // Every issue at once, in parameter order.
    let all = detail("?limit=0&after=x&role=bot&from=x&to=y&chat_id=%2F");
    let locs: Vec<Value> = all.iter().map(|d| d.0.clone()).collect();
    assert_eq!(
        locs,
        [
            json!(["query", "q"]),
            json!(["query", "chat_id"]),
            json!(["query", "role"]),
            json!(["query", "from"]),
            json!(["query", "to"]),
            json!(["query", "limit"]),
            json!(["query", "after"])
        ]
    );
    // Good spellings: percent-encoded keys, `+` for spaces, an empty optional parameter.
    for ok in ["?q=green+tea", "?q=tea&role=", "?q=tea&chat_id=", "?q=tea&role=user,assistant", "?q=%22%22"] {
        let r = server.get(&format!("/api/search{ok}"));
        // `""` has no words: an empty page, not an error.
        assert!(r.status == 200 || r.status == 422, "{ok}: {}", r.status);
        if ok != "?q=%22%22" {
            assert_eq!(r.status, 200, "{ok}: {}", r.body);
            assert_eq!(r.json()["hits"], json!([]));
        }
    }
    assert_eq!(server.request("POST", "/api/search?q=x", &[], Some("{}")).status, 405);
}

#[test]
fn the_search_history_tool_answers_inside_a_turn() {
    let OneChat { fake, server, mut ws, .. } = one_chat();
    let old = ws.new_chat();
    turn(&fake, &mut ws, &old, "We decided the database is Postgres 16 on the NAS", "Postgres 16 on the NAS, agreed.");
    let r = server.patch(&format!("/api/sessions/{old}"), &json!({"title": "Homelab plans"}));
    assert_eq!(r.status, 200, "{}", r.body);
    // The title is searched too, as a hit of its own.
    let v = search(&server, "q=homelab");
    assert_eq!(v["hits"][0]["role"], "title", "{v}");
    assert_eq!(v["hits"][0]["snippet"], "«Homelab» plans");

    let now = ws.new_chat();
    let args = json!({"query": "postgres database", "limit": 3});
    let call = ToolCallSpec::new("call_sh", "search_history", &[&args.to_string()]);
    fake.push(Reply::tool_calls(std::slice::from_ref(&call)));
    fake.push(Reply::text(&["You chose Postgres 16."]));
    let before = fake.chat_requests().len();
    ws.message(&now, "what did we decide about the database?", "openai_compatible");
    let events = ws.turn_events(&now);
    assert_eq!(events.last().map(|e| e["event"].clone()), Some(json!("done")), "{events:#?}");
    let reqs = fake.wait_chat_requests(before + 2, WAIT);
    let msgs = req_messages(&reqs[before + 1].body);
    let tool = msgs.last().unwrap();
    assert_eq!(tool["role"], "tool");
    let text = tool["content"].as_str().unwrap();
    assert!(text.contains(&format!("Homelab plans (chat {old}")), "{text}");
    assert!(text.contains("«Postgres»") && text.contains("«database»"), "{text}");
    // The tool is offered like every built-in.
    let tools = reqs[before].body["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["function"]["name"] == "search_history"));

    // Bad dates are the model's to fix; its own results are not indexed again.
    let args = json!({"query": "postgres", "from": "last month"});
    fake.push(Reply::tool_calls(&[ToolCallSpec::new("call_sh2", "search_history", &[&args.to_string()])]));
    fake.push(Reply::text(&["ok"]));
    let before = fake.chat_requests().len();
    ws.message(&now, "again", "openai_compatible");
    ws.turn_events(&now);
    let reqs = fake.wait_chat_requests(before + 2, WAIT);
    let msgs = req_messages(&reqs[before + 1].body);
    let text = msgs.last().unwrap()["content"].as_str().unwrap().to_string();
    assert!(text.contains("argument 'from' must be a date"), "{text}");
    let v = search(&server, "q=postgres&role=tool");
    assert!(hits(&v).is_empty(), "{v}");
}
