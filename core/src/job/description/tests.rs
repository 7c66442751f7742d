use super::*;
use proptest::prelude::*;

const CLASSIC: &str = r#"<?xml version="1.0"?>
<p2pjob>
  <executable>ring</executable>
  <arguments>20000</arguments>
  <inputfile>input1</inputfile>
  <outputfile>result.txt</outputfile>
  <processes>8</processes>
  <requirement>linux</requirement>
  <requirement>x86_64</requirement>
</p2pjob>
"#;

fn err(xml: &str) -> JobFileError {
    JobDescription::parse(xml.as_bytes()).unwrap_err()
}

#[test]
fn classic_file_is_accepted_unchanged() {
    let p = JobDescription::parse(CLASSIC.as_bytes()).unwrap();
    assert!(p.warnings.is_empty());
    let j = p.job;
    assert_eq!(j.executable, "ring");
    assert_eq!(j.arguments, ["20000"]);
    assert_eq!((j.inputfiles, j.outputfiles), (vec!["input1".to_owned()], vec!["result.txt".to_owned()]));
    assert_eq!(j.processes, 8);
    assert_eq!(j.requirements, [Requirement::Tag("linux".into()), Requirement::Tag("x86_64".into())]);
    assert_eq!((j.checkpoint, j.restart, j.timeout), (None, RestartPolicy::Fail, None));
}

#[test]
fn extensions_and_entities() {
    let xml = "<p2pjob><executable>a&amp;b</executable><arguments> -n  3\n x </arguments>\
        <argument>with space</argument><processes> 2 </processes>\
        <requirement>mem_mb&gt;=4096</requirement><requirement><![CDATA[cores>=2]]></requirement>\
        <checkpoint/><restart>restart</restart><timeout>90m</timeout><!-- c --></p2pjob>";
    let j = JobDescription::parse(xml.as_bytes()).unwrap().job;
    assert_eq!(j.executable, "a&b");
    assert_eq!(j.arguments, ["-n", "3", "x", "with space"]);
    assert_eq!(j.requirements.iter().map(ToString::to_string).collect::<Vec<_>>(), ["mem_mb>=4096", "cores>=2"]);
    assert_eq!(j.checkpoint, Some(DEFAULT_CHECKPOINT_INTERVAL));
    assert_eq!(j.restart, RestartPolicy::Checkpoint);
    assert_eq!(j.timeout, Some(Duration::from_secs(5400)));
    assert_eq!(JobDescription::parse(j.to_xml().as_bytes()).unwrap().job, j);
}

#[test]
fn unknown_elements_warn_with_position() {
    let xml = "<p2pjob>\n  <executable>x</executable>\n  <colour><deep>red</deep></colour>\n  stray\n\
        <processes>1</processes><requirement>linux</requirement></p2pjob>";
    let p = JobDescription::parse(xml.as_bytes()).unwrap();
    assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);
    assert_eq!((p.warnings[0].line, p.warnings[0].column), (3, 3));
    assert_eq!(p.warnings[0].kind, WarningKind::UnknownElement("colour".into()));
    assert_eq!(p.warnings[1].kind, WarningKind::StrayText);
}

#[test]
fn missing_mandatory_elements_name_the_element() {
    let e = err("<p2pjob>\n<processes>2</processes><requirement>linux</requirement></p2pjob>");
    assert_eq!((e.line, e.column, e.kind), (1, 1, JobFileErrorKind::Missing("executable")));
    let e = err("\n <p2pjob><executable>x</executable><requirement>linux</requirement></p2pjob>");
    assert_eq!((e.line, e.column, e.kind), (2, 2, JobFileErrorKind::Missing("processes")));
    let e = err("<p2pjob><executable>x</executable><processes>2</processes></p2pjob>");
    assert_eq!(e.kind, JobFileErrorKind::Missing("requirement"));
    assert_eq!(e.to_string(), "line 1, column 1: missing <requirement>");
}

#[test]
fn malformed_xml_names_line_and_column() {
    let e = err("<p2pjob>\n  <executable>x</executabel>\n</p2pjob>");
    assert!(matches!(e.kind, JobFileErrorKind::Xml(_)), "{e}");
    assert_eq!(e.line, 2, "{e}");
    let e = err("<p2pjob>\n  <executable>x</executable>\n  <processes>2");
    assert!(matches!(e.kind, JobFileErrorKind::Xml(_)), "{e}");
    let e = err("<p2pjob>\n\n   <processes>many</processes>");
    assert_eq!((e.line, e.column), (3, 4), "{e}");
    assert!(matches!(e.kind, JobFileErrorKind::Invalid { element: "processes", .. }));
    let e = JobDescription::parse(b"<p2pjob>\n\xff").unwrap_err();
    assert_eq!((e.line, e.column, e.kind), (2, 1, JobFileErrorKind::NotUtf8));
}

#[test]
fn structural_errors() {
    let base = "<executable>x</executable><processes>1</processes><requirement>a</requirement>";
    assert!(matches!(err("<job/>").kind, JobFileErrorKind::NotAJob(Some(_))));
    assert!(matches!(err("").kind, JobFileErrorKind::NotAJob(None)));
    assert!(matches!(err(&format!("<p2pjob>{base}</p2pjob><p2pjob/>")).kind, JobFileErrorKind::TrailingContent));
    assert!(matches!(
        err(&format!("<p2pjob>{base}<processes>2</processes></p2pjob>")).kind,
        JobFileErrorKind::Duplicate("processes")
    ));
    assert!(matches!(
        err(&format!("<p2pjob>{base}<timeout><b/></timeout></p2pjob>")).kind,
        JobFileErrorKind::Nested { .. }
    ));
    assert!(matches!(
        err(&format!("<p2pjob>{base}<requirement>a b</requirement></p2pjob>")).kind,
        JobFileErrorKind::Requirement(_)
    ));
    assert!(matches!(
        err(&format!("<p2pjob>{base}<restart>maybe</restart></p2pjob>")).kind,
        JobFileErrorKind::Invalid { .. }
    ));
    assert!(matches!(
        err(&format!("<p2pjob>{base}<timeout>0</timeout></p2pjob>")).kind,
        JobFileErrorKind::Invalid { .. }
    ));
    assert!(matches!(err(&format!("<p2pjob>{base}&bogus;</p2pjob>")).kind, JobFileErrorKind::Xml(_)));
}

#[test]
fn bounds() {
    let big = format!("<p2pjob>{}</p2pjob>", " ".repeat(MAX_JOB_FILE));
    assert!(matches!(err(&big).kind, JobFileErrorKind::TooLarge(_)));
    let e = err("<p2pjob><executable>x</executable><processes>4097</processes></p2pjob>");
    assert!(matches!(e.kind, JobFileErrorKind::Invalid { element: "processes", .. }));
    let e = err("<p2pjob><executable>x</executable><processes>0</processes></p2pjob>");
    assert!(matches!(e.kind, JobFileErrorKind::Invalid { element: "processes", .. }));
    let many = format!("<p2pjob>{}</p2pjob>", "<x/>".repeat(MAX_ELEMENTS + 1));
    assert!(matches!(err(&many).kind, JobFileErrorKind::TooMany("elements")));
    let deep = format!("<p2pjob>{}{}</p2pjob>", "<x>".repeat(MAX_DEPTH + 1), "</x>".repeat(MAX_DEPTH + 1));
    assert!(matches!(err(&deep).kind, JobFileErrorKind::TooMany(_)));
}

#[test]
fn run_builds_a_valid_file() {
    let j = JobDescription::run("./ring", vec!["20000".into()], 4);
    let back = JobDescription::parse(j.to_xml().as_bytes()).unwrap().job;
    assert_eq!(
        back.requirements,
        [Requirement::Compare { attr: "cores".into(), op: crate::job::Op::Ge, value: "1".into() }]
    );
    assert_eq!((back.executable, back.arguments, back.processes), (j.executable, j.arguments, 4));
}

#[test]
fn durations() {
    assert_eq!(parse_duration("1500ms"), Some(Duration::from_millis(1500)));
    assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
    assert_eq!(parse_duration(" 7 "), Some(Duration::from_secs(7)));
    for bad in ["", "s", "-1", "1.5s", "99999999999999h", "1d"] {
        assert_eq!(parse_duration(bad), None, "{bad}");
    }
}

fn arb_text() -> impl Strategy<Value = String> {
    // Printable text including XML specials and inner spaces, never blank at the ends.
    "[a-zA-Z0-9./_<>&'\"-][a-zA-Z0-9./_<>&'\" -]{0,10}[a-zA-Z0-9./_<>&'\"-]|[a-z]"
}

fn arb_requirement() -> impl Strategy<Value = Requirement> {
    prop_oneof![
        "[a-z][a-z0-9_]{0,6}".prop_map(Requirement::Tag),
        ("[a-z_]{1,6}", proptest::sample::select(crate::job::Op::ALL.to_vec()), "[a-z0-9.]{1,6}")
            .prop_map(|(attr, op, value)| Requirement::Compare { attr, op, value }),
    ]
}

fn arb_job() -> impl Strategy<Value = JobDescription> {
    (
        arb_text(),
        proptest::collection::vec("[^\\x00\\s]{1,6}|[ a-z\\t\\r\\n&<]{0,6}", 0..5),
        proptest::collection::vec(arb_text(), 0..3),
        proptest::collection::vec(arb_text(), 0..3),
        1..=MAX_PROCESSES,
        proptest::collection::vec(arb_requirement(), 1..4),
        proptest::option::of((1u64..1_000_000).prop_map(Duration::from_millis)),
        any::<bool>(),
        (
            proptest::option::of((1u64..1_000_000).prop_map(Duration::from_millis)),
            proptest::option::of((1u64..1_000_000).prop_map(Duration::from_millis)),
            // Variables: distinct names; a value keeps all but trailing
            // whitespace (an element's text is trimmed).
            proptest::collection::btree_map("[A-Za-z_][A-Za-z0-9_]{0,8}", "([ a-z=&<\t]{0,6}[a-z=&<])?", 0..4),
        ),
    )
        // Staged files have distinct base names (the parser refuses others).
        .prop_filter("staged names collide", |t| {
            let names: Vec<&str> = std::iter::once(&t.0).chain(&t.2).map(|p| staged_name(p)).collect();
            let unique: std::collections::BTreeSet<&str> = names.iter().copied().collect();
            unique.len() == names.len() && !unique.contains(STAGED_JOB_FILE)
        })
        // Paths stay inside the job directory (the parser refuses others).
        .prop_filter("paths leave the job directory", |t| {
            check_path(&t.0, PathUse::Executable).is_ok()
                && t.2.iter().all(|p| check_path(p, PathUse::Input).is_ok())
                && t.3.iter().all(|p| check_path(p, PathUse::Output).is_ok())
        })
        .prop_map(
            |(
                executable,
                arguments,
                inputfiles,
                outputfiles,
                processes,
                requirements,
                checkpoint,
                r,
                (timeout, queue_timeout, env),
            )| {
                JobDescription {
                    executable,
                    arguments,
                    inputfiles,
                    outputfiles,
                    processes,
                    requirements,
                    checkpoint,
                    restart: if r { RestartPolicy::Checkpoint } else { RestartPolicy::Fail },
                    timeout,
                    queue_timeout,
                    limits: Vec::new(),
                    env: env.into_iter().filter(|(k, _)| !k.starts_with(NODE_ENV_PREFIX)).collect(),
                }
            },
        )
}

proptest! {
    #[test]
    fn xml_round_trip(job in arb_job()) {
        let xml = job.to_xml();
        let back = JobDescription::parse(xml.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}\n{xml}")))?;
        prop_assert!(back.warnings.is_empty());
        prop_assert_eq!(back.job, job);
    }

    #[test]
    fn any_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        crate::fuzzing::job_file(&data);
    }

    #[test]
    fn mutated_classic_files_never_panic(cut in 0..CLASSIC.len(), byte in any::<u8>()) {
        let mut data = CLASSIC.as_bytes().to_vec();
        data[cut] = byte;
        crate::fuzzing::job_file(&data);
        crate::fuzzing::job_file(&CLASSIC.as_bytes()[..cut]);
    }
}

#[test]
fn files_that_would_share_a_name_in_the_job_directory_are_refused_where_they_stand() {
    let job =
        |body: &str| format!("<p2pjob>\n<processes>1</processes><requirement>linux</requirement>\n{body}\n</p2pjob>");
    let e = err(&job(
        "<executable>prog</executable>\n<inputfile>a/data.txt</inputfile>\n<inputfile>b/data.txt</inputfile>",
    ));
    assert_eq!((e.line, e.column), (5, 1), "{e}");
    let text = e.to_string();
    assert!(text.contains("\"b/data.txt\" and \"a/data.txt\" would both be staged as \"data.txt\""), "{text}");
    // The executable counts, whether it comes before or after the inputs.
    assert!(err(&job("<inputfile>bin/prog</inputfile>\n<executable>./prog</executable>")).to_string().contains("prog"));
    assert!(err(&job("<executable>x/run</executable>\n<inputfile>run</inputfile>")).to_string().contains("\"run\""));
    assert!(
        err(&job("<executable>p</executable>\n<inputfile>cfg/job.xml</inputfile>")).to_string().contains("job file")
    );
    // Different base names are fine, whatever their directories.
    let ok =
        job("<executable>bin/prog</executable>\n<inputfile>a/data.txt</inputfile>\n<inputfile>a/other.txt</inputfile>");
    assert_eq!(JobDescription::parse(ok.as_bytes()).unwrap().job.inputfiles.len(), 2);
}

#[test]
fn exits_are_described_with_signal_names() {
    assert_eq!(crate::job::describe_exit(0), "exited with code 0");
    assert_eq!(crate::job::describe_exit(3), "exited with code 3");
    assert_eq!(crate::job::describe_exit(-11), "was killed by SIGSEGV");
    assert_eq!(crate::job::describe_exit(-9), "was killed by SIGKILL");
    assert_eq!(crate::job::describe_exit(-40), "was killed by signal 40");
}

#[test]
fn checkpoint_and_restart_values() {
    let job = |inner: &str| {
        JobDescription::parse(
            format!("<p2pjob><executable>x</executable><processes>1</processes><requirement>linux</requirement>{inner}</p2pjob>")
                .as_bytes(),
        )
    };
    let j = job("<checkpoint>30s</checkpoint><restart>scratch</restart>").unwrap().job;
    assert_eq!((j.checkpoint, j.restart), (Some(Duration::from_secs(30)), RestartPolicy::Scratch));
    assert_eq!(JobDescription::parse(j.to_xml().as_bytes()).unwrap().job, j);
    let j = job("<checkpoint>0</checkpoint><restart>checkpoint</restart>").unwrap().job;
    assert_eq!((j.checkpoint, j.restart), (None, RestartPolicy::Checkpoint), "0: only on request");
    assert_eq!(job("<restart>restart</restart>").unwrap().job.restart, RestartPolicy::Checkpoint);
    assert_eq!(job("").unwrap().job.restart, RestartPolicy::Fail);
    for bad in [
        "<restart>maybe</restart>",
        "<checkpoint>soon</checkpoint>",
        "<checkpoint>0</checkpoint><checkpoint>1</checkpoint>",
    ] {
        assert!(job(bad).is_err(), "{bad}");
    }
}

#[test]
fn paths_that_escape_the_job_directory_are_refused_where_they_stand() {
    let job =
        |body: &str| format!("<p2pjob>\n<processes>1</processes><requirement>linux</requirement>\n{body}\n</p2pjob>");
    let e = err(&job("<executable>prog</executable>\n  <inputfile>../x</inputfile>"));
    assert_eq!((e.line, e.column), (4, 3), "{e}");
    assert!(e.to_string().contains("<inputfile> \"../x\" has a \"..\" component"), "{e}");
    let e = err(&job("<executable>prog</executable>\n<inputfile>/etc/passwd</inputfile>"));
    assert_eq!((e.line, e.column), (4, 1), "{e}");
    assert!(e.to_string().contains("\"/etc/passwd\" is an absolute path"), "{e}");
    let e = err(&job("<executable>prog</executable>\n<outputfile>../../x</outputfile>"));
    assert!(matches!(e.kind, JobFileErrorKind::Path { element: "outputfile", problem: PathProblem::ParentDir, .. }));
    let e = err(&job("<executable>prog</executable>\n<outputfile>/etc/shadow</outputfile>"));
    assert!(matches!(e.kind, JobFileErrorKind::Path { problem: PathProblem::Absolute, .. }), "{e}");
    let e = err(&job("<executable>../bin/prog</executable>"));
    assert_eq!((e.line, e.column), (3, 1), "{e}");
    assert!(e.to_string().contains("<executable> \"../bin/prog\""), "{e}");
    // An absolute executable names a program (as `p2pjob run` writes it).
    assert!(JobDescription::parse(job("<executable>/bin/true</executable>").as_bytes()).is_ok());
}

#[test]
fn a_job_asks_for_limits_below_the_nodes() {
    let job = |body: &str| {
        format!(
            "<p2pjob><executable>p</executable><processes>1</processes><requirement>linux</requirement>{body}</p2pjob>"
        )
    };
    let p = JobDescription::parse(job("<limit>memory_mb=256</limit><limit> cpu_s = 10 </limit>").as_bytes()).unwrap();
    assert_eq!(p.job.limits, [("memory_mb".to_owned(), 256), ("cpu_s".to_owned(), 10)]);
    assert_eq!(JobDescription::parse(p.job.to_xml().as_bytes()).unwrap().job, p.job);
    for (bad, says) in [
        ("<limit>memory=1</limit>", "not one of"),
        ("<limit>memory_mb</limit>", "KEY=VALUE"),
        ("<limit>memory_mb=0</limit>", "above 0"),
        ("<limit>memory_mb=-1</limit>", "whole number"),
        ("<limit>disk_mb=1</limit><limit>disk_mb=2</limit>", "more than once"),
    ] {
        assert!(err(&job(bad)).to_string().contains(says), "{bad}: {}", err(&job(bad)));
    }
}

#[test]
fn a_job_sets_variables_of_its_ranks_but_not_the_nodes() {
    let job = |body: &str| {
        format!(
            "<p2pjob><executable>p</executable><processes>1</processes><requirement>linux</requirement>{body}</p2pjob>"
        )
    };
    let body = "<env>OMP_NUM_THREADS=4</env><env> GREETING=a b=c &amp; d </env><env>EMPTY=</env>";
    let p = JobDescription::parse(job(body).as_bytes()).unwrap();
    let want = [("OMP_NUM_THREADS", "4"), ("GREETING", "a b=c & d"), ("EMPTY", "")];
    assert_eq!(p.job.env, want.map(|(n, v)| (n.to_owned(), v.to_owned())));
    assert_eq!(JobDescription::parse(p.job.to_xml().as_bytes()).unwrap().job, p.job, "written back as read");
    for (bad, says) in [
        ("<env>NOVALUE</env>", "NAME=VALUE"),
        ("<env>1X=1</env>", "not a variable name"),
        ("<env>A-B=1</env>", "not a variable name"),
        ("<env>=1</env>", "not a variable name"),
        ("<env>P2PMP_RANK=3</env>", "the node's to set"),
        ("<env>A=1</env><env>A=2</env>", "more than once"),
    ] {
        assert!(err(&job(bad)).to_string().contains(says), "{bad}: {}", err(&job(bad)));
    }
    let many: String = (0..=MAX_ENV).map(|i| format!("<env>V{i}=1</env>")).collect();
    assert!(err(&job(&many)).to_string().contains("env variables"), "at most {MAX_ENV}");
}
