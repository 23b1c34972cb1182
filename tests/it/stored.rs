//! What is stored is protected (issue 15): the database, its `-wal` and `-shm` files, the lock and
//! the server key are readable by their owner only, and the database holds no answer-link token
//! and no way to make one, so a copy of it cannot answer a gate.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse::domain::{GateId, ServerKey};

use crate::helpers::{ServerProcess, ask, eventually, gate_id, sqlite_db, uuid};

fn beside(db: &Path, suffix: &str) -> PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push(suffix);
    PathBuf::from(path)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

/// The answer-link token of a gate, made the way the server makes it: from its key file.
fn link_token(db: &Path, gate: &str) -> String {
    let key = std::fs::read(beside(db, ".key")).expect("the server key file");
    let key = ServerKey::new(key.trim_ascii().to_vec()).expect("a usable key");
    key.link_token(GateId::parse(gate).unwrap())
}

#[tokio::test]
async fn files_are_private_and_an_exposed_database_is_reported() {
    let Some((_dir, db)) = sqlite_db("the database files") else {
        return;
    };
    let server = ServerProcess::start(&db);
    let (session, _, gate) = server.open_asking("Private?").await;
    server.answer(&session, &gate, "yes").await.expect(202);
    for suffix in ["", "-wal", "-shm", ".lock", ".key"] {
        assert_eq!(mode(&beside(&db, suffix)), 0o600, "gatehouse.db{suffix} is for its owner only");
    }
    assert_eq!(server.terminate(Duration::from_secs(5)), Some(0));

    // Someone loosened it: the next start says so (and still starts).
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let server = ServerProcess::start(&db);
    let mut warned = Vec::new();
    eventually("the start-up warning", async || {
        warned.extend(server.log_lines());
        warned.iter().any(|l| l.contains("readable or writable by other users") && l.contains("gatehouse.db"))
    })
    .await;
    assert_eq!(server.view(&session, &gate).await["state"], "resolved");
}

#[tokio::test]
async fn the_database_holds_no_answer_link_and_a_copy_of_it_cannot_answer() {
    let Some((_dir, db)) = sqlite_db("a copy of the database file") else {
        return;
    };
    let server = ServerProcess::start(&db);
    let session = uuid();
    let mut gates = Vec::new();
    for n in 0..3 {
        gates.push(gate_id(&server.open(&session, &ask(&uuid(), &uuid(), &format!("Linked {n}?"))).await));
    }
    let tokens: Vec<String> = gates.iter().map(|gate| link_token(&db, gate)).collect();
    // The tokens are the real ones: the first answers its gate.
    let link = format!("/v1/answers/{}", tokens[0]);
    server.post(&link, &crate::helpers::answer("by link")).await.expect(202);
    assert_eq!(server.view(&session, &gates[0]).await["resolution"]["source"]["principal"], "answer-link");
    // Killed, so nothing was checkpointed or tidied at shutdown: the files as they are mid-run.
    server.kill();

    let key = std::fs::read_to_string(beside(&db, ".key")).unwrap();
    let stored: Vec<u8> =
        ["", "-wal", "-shm"].iter().flat_map(|s| std::fs::read(beside(&db, s)).unwrap_or_default()).collect();
    let holds = |needle: &str| stored.windows(needle.len()).any(|w| w == needle.as_bytes());
    for token in &tokens {
        assert!(!holds(token), "an answer-link token is readable in the database files");
    }
    assert!(!holds(key.trim()), "the server key is readable in the database files");

    // A copy of the database, without the key file beside it, serves with a key of its own: the
    // links do not answer there, and the gates stay answerable through the API.
    let copy_dir = tempfile::tempdir().unwrap();
    let copy = copy_dir.path().join("copy.db");
    for suffix in ["", "-wal"] {
        if beside(&db, suffix).exists() {
            std::fs::copy(beside(&db, suffix), beside(&copy, suffix)).unwrap();
        }
    }
    let stolen = ServerProcess::start(&copy);
    for (gate, token) in gates.iter().zip(&tokens).skip(1) {
        stolen.post(&format!("/v1/answers/{token}"), &crate::helpers::answer("forged")).await.expect(404);
        assert_eq!(stolen.view(&session, gate).await["state"], "open");
    }
}
