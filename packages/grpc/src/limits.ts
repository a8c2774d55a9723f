/**
 * Maximum message size set explicitly both ways on every server and client.
 * 16 MiB is far above any control-plane message and bounds a hostile sender.
 */
export const defaultMaxMessageBytes = 16 * 1024 * 1024;
