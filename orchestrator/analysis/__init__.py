"""Looking back at runs: the report (plan against reality), the timeline drawing and the calibration of
the pre-copy and suspend/resume models against measurements."""
