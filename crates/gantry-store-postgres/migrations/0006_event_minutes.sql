-- Each project's events per minute, for the project overview: the minute's start (epoch ms) and
-- how many of the project's events were stored in it. Nodes add their counts to a row
-- (`ON CONFLICT ... DO UPDATE`); rows of minutes past the overview's window are deleted.
CREATE TABLE project_event_minutes (
    project_id TEXT NOT NULL,
    minute BIGINT NOT NULL,
    tenant_id TEXT NOT NULL,
    events BIGINT NOT NULL,
    PRIMARY KEY (project_id, minute)
);
CREATE INDEX project_event_minutes_by_minute ON project_event_minutes (minute);
