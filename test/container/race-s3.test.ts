import { runLiveWriterRace } from '../helpers/race.js'
import { s3TestStore } from '../helpers/s3-env.js'

runLiveWriterRace('s3 (radosgw)', () => s3TestStore())
