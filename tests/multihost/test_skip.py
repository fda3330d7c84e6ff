"""Without root the namespace tests skip, saying why (checked by making
this process look unprivileged)."""
import netns


def test_not_root_is_a_reason(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert "need root" in netns.why_not()
    assert not netns.can_run()


def test_make_cluster_skips_when_not_root(unprivileged_skip_message):
    assert unprivileged_skip_message.startswith("network namespaces need root")
